"""What a run says when a task's data is missing: the fetch command for a task fetched from official files (run.py
never downloads unasked), the generate command kept for generated ones, and no generated data in a folder of
fetched official splits."""

from __future__ import annotations

import json

import pytest

from lra_base.errors import UserError


@pytest.mark.parametrize("task", ["text", "retrieval", "image"])
def test_missing_converted_data_names_the_fetch_command_first(task, tmp_path):
    from lra.tasks import image, retrieval, text
    from tests.lra.conftest import compose_run

    modules = {"text": text, "retrieval": retrieval, "image": image}
    data = modules[task].DataModule(compose_run([f"task={task}", f"data_dir={tmp_path}"]))
    with pytest.raises(UserError) as err:
        data.prepare_data()
    message = str(err.value)
    fetch = f"python -m data_prep fetch {task} --out {tmp_path}"
    convert = f"python -m data_prep {task} --source PATH --out {tmp_path}"
    assert fetch in message and convert in message and message.index(fetch) < message.index(convert)
    assert message.count("\n") <= 4 and not (tmp_path / task).exists()


@pytest.mark.parametrize("experiment", [[], ["experiment=quick"]], ids=["default", "quick"])
def test_generated_data_is_never_made_in_a_folder_of_official_splits(experiment, tmp_path):
    from lra.tasks import listops
    from tests.lra.conftest import compose_run

    official = tmp_path / "official"
    official.mkdir()
    (official / "official.json").write_text(json.dumps({"what": "fetched"}))
    data = listops.DataModule(compose_run(["task=listops", f"data_dir={official}", *experiment]))
    with pytest.raises(UserError) as err:
        data.prepare_data()
    message = str(err.value)
    assert "official splits" in message and f"python -m data_prep fetch listops --out {tmp_path}" in message
    assert f"data_dir={official} " in message and "\n" not in message
    assert list(official.iterdir()) == [official / "official.json"]


def test_generating_missing_data_also_names_the_official_fetch(tmp_path, caplog):
    from lra.tasks import listops
    from tests.lra.conftest import TINY, compose_run

    data = listops.DataModule(compose_run(["task=listops", f"data_dir={tmp_path}", *TINY]))
    with caplog.at_level("INFO", logger="lra.generated_data"):
        data.prepare_data()
    shown = caplog.text
    assert "generating it now (python -m data_prep listops --out" in shown
    assert f"python -m data_prep fetch listops --out {tmp_path}, then data_dir={tmp_path / 'official'}" in shown
