"""``--attentions`` of the benchmarks: registered names only, and an override given there is named as one."""

import pytest

from benchmarks import run_estimate_versions, step


@pytest.mark.parametrize("main", [step.main, run_estimate_versions.main])
def test_an_override_after_attentions_is_refused_with_where_it_goes(main, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--against", "HEAD", "--attentions", "softmax", "model.dim=3"] if main is run_estimate_versions.main
             else ["--attentions", "softmax", "model.dim=3"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "'model.dim=3' is a Hydra override" in err and "after `--`" in err


def test_an_unknown_attention_lists_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        step.main(["--attentions", "sofmax"])
    err = capsys.readouterr().err
    assert "unknown attention 'sofmax'" in err and "softmax" in err.split("valid:")[1]
