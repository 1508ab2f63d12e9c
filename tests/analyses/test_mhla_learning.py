"""MHLA learning analysis (arXiv 2410.10101): teachers, function coefficients, students and the quick command."""

from __future__ import annotations

import json

import pytest
import torch

from analyses import mhla_learning
from analyses._mhla_data import (
    coefficient_distance,
    function_coefficients,
    gaussian_sequences,
    memory_sequences,
    memory_teacher,
    random_mhla,
)
from analyses._mhla_model import fit_mhla, identifiability_certificate
from analyses._mhla_training import CoefficientModel, MHLAStack, Summary, normalised_mse, train_adamw
from tests.conftest import assert_close


def test_convex_fit_recovers_a_random_teacher_to_float64_precision():
    """lambda_min > 0 on Gaussian data, so Algorithm 1 computes the teacher's function on any input."""
    gen = torch.Generator().manual_seed(0)
    d = 3
    teacher = random_mhla(d, d * d, gen)
    z = gaussian_sequences(300, d, 12, gen)
    assert float(identifiability_certificate(z)) > 1e-4
    with torch.no_grad():
        fit = fit_mhla(z, teacher.predict_last(z))
        z_new = gaussian_sequences(50, d, 31, gen) * 3  # other length, other scale
        assert_close(teacher.predict_last(z_new), fit.predict_last(z_new), ratio=1e-8)
    truth = teacher.coefficients().detach()
    assert coefficient_distance(fit.coefficients(), truth) < 1e-8 * function_coefficients(truth).norm()


def test_function_coefficients_are_the_linear_model_on_deduplicated_features():
    """y_hat_a = <p_a, H(Z)>; swapping W's (j, k) roles keeps p (same function), a perturbation changes it."""
    gen = torch.Generator().manual_seed(1)
    d = 3
    model = random_mhla(d, 2, gen)
    z = gaussian_sequences(7, d, 5, gen)
    gram = z @ z.transpose(-1, -2)
    rows, cols = torch.triu_indices(d, d)
    features = gram[:, rows, cols].unsqueeze(-1) * z[:, None, :, -1]  # (B, psi, d): H(Z)
    w = model.coefficients().detach()
    p = function_coefficients(w)
    assert_close(model.predict_last(z).detach(), torch.einsum("aml,bml->ba", p, features), ratio=1e-12)
    swapped = w.reshape(d, d, d, d).transpose(1, 2).reshape(d * d, d * d)
    assert coefficient_distance(swapped, w) < 1e-12
    assert coefficient_distance(w + 0.1 * torch.randn(w.shape, generator=gen, dtype=w.dtype), w) > 1e-2


def test_certificate_is_zero_for_orthogonal_memories_and_positive_for_gaussian():
    gen = torch.Generator().manual_seed(2)
    orthogonal = memory_sequences(800, 4, 1.0, gen)  # N = 800 > psi = 288: rank deficiency is structural
    gaussian = memory_sequences(800, 4, 0.0, gen)
    assert abs(float(identifiability_certificate(orthogonal))) < 1e-10
    assert float(identifiability_certificate(gaussian)) > 1e-2


def test_zero_error_fits_agree_only_when_the_certificate_is_positive():
    """Least squares from a random start: exact on both sets, the teacher's function only on full-rank data."""
    gen = torch.Generator().manual_seed(3)
    teacher = memory_teacher(4)
    truth = teacher.coefficients().detach()
    start = random_mhla(8, 1, gen)
    distances = []
    for fraction in (0.0, 1.0):
        z = memory_sequences(800, 4, fraction, gen)
        with torch.no_grad():
            y = teacher.predict_last(z)
            w = start.coefficients() + fit_mhla(z, y - start.predict_last(z)).coefficients()
            fit = fit_mhla(z, y)
        assert normalised_mse(linear_model(w), Summary.of(z), y, float(y.pow(2).mean())) < 1e-20
        assert coefficient_distance(fit.coefficients(), truth) < 1e-9  # min-norm: the teacher lies in the row space
        distances.append(coefficient_distance(w, truth))
    assert distances[0] < 1e-9 < 0.1 < distances[1]


def linear_model(w):
    """Algorithm 1's linear model holding ``W``."""
    model = CoefficientModel(round(w.shape[0] ** 0.5))
    with torch.no_grad():
        model.w.copy_(w)
    return model


def test_stack_prediction_from_gram_equals_the_layers_on_the_sequence():
    """Z <- Z + MHLA(Z) for hidden layers, last layer's last column: through (Z Z^T, z_n) only."""
    gen = torch.Generator().manual_seed(4)
    d = 3
    stack = MHLAStack(d, 2, 3, gen)
    z = gaussian_sequences(5, d, 9, gen)
    hidden = z
    for layer in stack.layers[:-1]:
        hidden = hidden + layer(hidden)
    with torch.no_grad():
        assert_close(stack.layers[-1].predict_last(hidden), stack.predict(Summary.of(z)), ratio=1e-12)
        single = MHLAStack(d, 4, 1, gen)
        assert_close(single.layers[0].predict_last(z), single.predict(Summary.of(z)), ratio=1e-12)


def test_trained_one_head_student_stays_far_above_the_convex_fit():
    """A d^2-head teacher: one head cannot represent it, Algorithm 1 fits it to float64 precision."""
    gen = torch.Generator().manual_seed(5)
    d = 2
    teacher = random_mhla(d, d * d, gen)
    z = gaussian_sequences(128, d, 20, gen)
    with torch.no_grad():
        y = teacher.predict_last(z)
        convex = fit_mhla(z, y)
        convex_mse = float((convex.predict_last(z) - y).pow(2).mean() / y.pow(2).mean())
    student = MHLAStack(d, 1, 1, gen)
    curve = train_adamw(student, Summary.of(z), y, epochs=40, batch=32, lr=1e-2, generator=gen)
    assert curve[-1] < curve[0]
    assert convex_mse < 1e-20
    assert curve[-1] > 1e-4


def test_quick_command_writes_records_tables_and_pngs(tmp_path):
    out, tables = tmp_path / "out", tmp_path / "tables"
    assert mhla_learning.main(["--quick", "--out-root", str(out), "--tables", str(tables)]) == 0
    for name in ("mhla_teacher", "mhla_memory"):
        record = json.loads((out / name / "result.json").read_text(encoding="utf-8"))
        assert record["kind"] == "analysis" and record["analysis"] == name and record["published"] is None
        assert any(note.startswith("Published") for note in record["notes"])
        assert (out / name / "cells.json").is_file()
        assert (tables / f"{name}.csv").is_file() and (tables / f"{name}.png").stat().st_size > 1000
        assert "Alg. 1" in (tables / f"{name}.md").read_text(encoding="utf-8")
    teacher = json.loads((out / "mhla_teacher" / "result.json").read_text(encoding="utf-8"))
    convex = next(r for r in teacher["rows"] if r["model"] == "Alg. 1 (convex)")
    assert convex["train_mse"] < 1e-20 and convex["heldout_mse"] < 1e-20
    assert {r["model"] for r in teacher["rows"]} >= {"MHLA H=1", "MHLA H=4", "MHLA H=1 x 2 layers"}


def test_interrupted_command_resumes_without_retraining_finished_cells(tmp_path, monkeypatch, capsys):
    out, tables = tmp_path / "out", tmp_path / "tables"
    argv = ["--quick", "--out-root", str(out), "--tables", str(tables)]
    real, calls = mhla_learning.memory_cells, []

    def fail_at_the_second(cfg, fraction, seed):
        if calls:
            raise RuntimeError("killed")
        calls.append(fraction)
        return real(cfg, fraction, seed)

    monkeypatch.setattr(mhla_learning, "memory_cells", fail_at_the_second)
    with pytest.raises(RuntimeError):
        mhla_learning.main(argv)
    err = capsys.readouterr().err
    assert "mhla_learning: 4 cells to measure; expected ~" in err  # 1 teacher setting + 3 fractions, 1 seed
    partial = json.loads((out / "mhla_learning" / "cells.partial.json").read_text(encoding="utf-8"))
    assert len(partial["cells"]) == 2  # the teacher cell and the first memory cell

    calls.clear()
    monkeypatch.setattr(mhla_learning, "memory_cells", lambda cfg, f, s: calls.append(f) or real(cfg, f, s))
    monkeypatch.setattr(mhla_learning, "teacher_cells", lambda *a: pytest.fail("the teacher cell was finished"))
    assert mhla_learning.main(argv) == 0
    assert calls == [0.9, 1.0] and not (out / "mhla_learning" / "cells.partial.json").exists()
    assert "2 cells to measure, 2 finished earlier and reused" in capsys.readouterr().err
