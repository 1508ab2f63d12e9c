"""MHLA in the paper's parametrisation (arXiv 2410.10101): the linear-time form, cubic features, Algorithm 1."""

from __future__ import annotations

import torch

from analyses._mhla_model import MHLA, cubic_features, explicit_mhla, fit_mhla, identifiability_certificate
from tests.conftest import assert_close


def test_linear_time_form_equals_the_explicit_sum():
    """Y = sum_h V_h (Z Z^T) Q_h Z against y_j = sum_h V_h sum_i z_i (z_i^T Q_h z_j) term by term."""
    torch.manual_seed(0)
    d, heads, n = 3, 2, 5
    model = MHLA(d, heads).double()
    z = torch.randn(1, d, n, dtype=torch.float64)
    fast = model(z)
    assert_close(explicit_mhla(z, model.values, model.queries), fast, ratio=1e-12)
    for j in range(n):
        y_j = sum(model.values[h] @ z[0, :, i] * (z[0, :, i] @ model.queries[h] @ z[0, :, j])
                  for h in range(heads) for i in range(n))
        assert_close(y_j, fast[0, :, j], ratio=1e-12)
    assert_close(fast[..., -1], model.predict_last(z), ratio=1e-12)


def test_cubic_features_linearise_the_last_column():
    """y_hat_a = sum_{j,(k,l)} W[(a, j), (k, l)] X(Z)[j, (k, l)], W = sum_h vec(V_h) vec(Q_h)^T."""
    torch.manual_seed(0)
    d = 3
    model = MHLA(d, 4).double()
    z = torch.randn(5, d, 7, dtype=torch.float64)
    w = model.coefficients().reshape(d, d, d * d)  # (a, j, (k, l))
    assert torch.linalg.matrix_rank(model.coefficients()) <= 4
    linear = torch.einsum("ajc,bjc->ba", w, cubic_features(z))
    assert_close(model.predict_last(z), linear, ratio=1e-12)


def test_algorithm_1_recovers_the_teacher_function():
    """Least squares on cubic features + SVD heads: same predictions as the teacher on new sequences."""
    torch.manual_seed(0)
    d = 3
    teacher = MHLA(d, 2).double()
    z_train = torch.randn(300, d, 6, dtype=torch.float64)
    with torch.no_grad():
        student = fit_mhla(z_train, teacher.predict_last(z_train))
        z_test = torch.randn(50, d, 11, dtype=torch.float64)  # other length, other inputs
        assert student.values.shape[0] <= d * d
        assert_close(teacher.predict_last(z_test), student.predict_last(z_test), ratio=1e-8)


def test_identifiability_certificate():
    """lambda_min > 0 with enough diverse sequences (N >= psi = d^2 (d + 1) / 2 = 18), 0 with too few."""
    torch.manual_seed(0)
    d = 3
    assert float(identifiability_certificate(torch.randn(200, d, 5, dtype=torch.float64))) > 1e-3
    assert abs(float(identifiability_certificate(torch.randn(10, d, 5, dtype=torch.float64)))) < 1e-10
