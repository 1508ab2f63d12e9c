"""``python -m data_prep fetch`` end to end against a local server on 127.0.0.1 serving tiny archives in the official
layouts (the sources table pinned to them): every task fetched, checked, unpacked and imported, then a fast_dev_run
per task on what it wrote; a second fetch needs no network. Failures: test_fetch_failures.py."""

from __future__ import annotations

import json

import pytest

from data_prep import fetch_sources
from data_prep.__main__ import main as cli
from data_prep.compact import load_manifest
from tests.data_prep.fetch_archives import official_files, pin
from tests.data_prep.fetch_server import Server, closed_port_url

TASK_FOLDERS = {"text": "text", "image": "image", "retrieval": "retrieval", "listops": "official/listops",
                "pathfinder": "official/pathfinder", "pathx": "official/pathx"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return official_files(tmp_path_factory.mktemp("release_members"))


@pytest.fixture(scope="module")
def fetched(files, tmp_path_factory):
    """``fetch all`` from the local mirror into a fresh data root; (root, the requests the server saw)."""
    out = tmp_path_factory.mktemp("fetched") / "data"
    with Server(files) as server, pytest.MonkeyPatch.context() as patch:
        pin(patch, files)
        assert cli(["fetch", "all", "--out", str(out), "--mirror", server.url, "--timeout", "10"]) == 0
        return out, list(server.requests)


def test_help_lists_every_source_with_size_and_checksum(capsys):
    with pytest.raises(SystemExit) as done:
        cli(["fetch", "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    for source in fetch_sources.SOURCES.values():
        assert source.url in shown and source.size_text() in shown and source.checksum_text() in shown
    assert "170498071 bytes; md5 c58f30108f718f92721af3b95e74349a" in shown
    assert "84125825 bytes; sha256 c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe" in shown
    assert "no published checksum" in shown and "torchvision/datasets/cifar.py" in shown


def test_fetch_all_imports_every_task_and_keeps_the_checked_archives(fetched, files):
    out, requests = fetched
    for task, folder in TASK_FOLDERS.items():
        manifest = load_manifest(out / folder, rebuild_cmd="x")
        assert manifest["task"] == task and "import" in manifest["source"]
    assert sorted(p.name for p in (out / "downloads").iterdir() if p.is_file()) == sorted(files)
    assert [name for name, _ in requests].count("lra_release.gz") == 1  # one download, one pass for four tasks
    assert json.loads((out / "official" / "official.json").read_text())["tasks"] == ["listops", "pathfinder", "pathx"]
    counts = {task: {s: v["count"] for s, v in load_manifest(out / folder, rebuild_cmd="x")["splits"].items()}
              for task, folder in TASK_FOLDERS.items()}
    assert counts["image"] == {"train": 18, "val": 2, "test": 6}  # 5 x 4 train images, 90/10 in file order
    assert counts["text"]["test"] == 12 and counts["text"]["train"] + counts["text"]["val"] == 24
    assert counts["retrieval"] == {"train": 12, "val": 6, "test": 6}
    assert counts["listops"] == {"train": 40, "val": 8, "test": 8}
    assert sum(counts["pathfinder"].values()) == 12 and sum(counts["pathx"].values()) == 10
    unsup = out / "downloads" / "aclImdb" / "train" / "unsup"
    assert not unsup.exists() and not (out / "downloads" / "lra_release" / "pathfinder32" / "curv_baseline").exists()


def test_a_second_fetch_needs_no_network(fetched, files, capsys, monkeypatch):
    out, _ = fetched
    pin(monkeypatch, files)
    offline = closed_port_url()
    assert cli(["fetch", "all", "--out", str(out), "--mirror", offline, "--timeout", "2"]) == 0
    assert capsys.readouterr().out.count("is already prepared") == 6
    before = (out / "image" / "manifest.json").read_bytes()
    assert cli(["fetch", "image", "--out", str(out), "--mirror", offline, "--force", "--timeout", "2"]) == 0
    assert "cifar10: using" in capsys.readouterr().out  # the checked archive, checked again
    assert (out / "image" / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("task", list(TASK_FOLDERS))
def test_fast_dev_run_on_fetched_data(task, fetched, tmp_path):
    from lra.run.train import run
    from tests.lra.conftest import compose_run

    out, _ = fetched
    root = out / "official" if TASK_FOLDERS[task].startswith("official/") else out
    before = sorted(root.iterdir())
    extra = {"text": ["task.max_len=128"], "retrieval": ["task.max_len=128"],
             "pathx": ["task.batch_size=2", "attention=llops"]}  # softmax over 16384 tokens: seconds per batch
    settings = compose_run([f"task={task}", f"data_dir={root}", "task.batch_size=4", "attention=softmax",
                            "trainer=debug", "trainer.fast_dev_run=1", *extra.get(task, [])])
    record = run(settings, tmp_path)
    assert record["status"] == "completed" and record["task"] == task
    assert sorted(root.iterdir()) == before  # trained on the fetched data: nothing generated beside it


def test_run_py_trains_on_fetched_image_data(fetched, tmp_path):
    from tests.lra.test_run import run_py

    out, _ = fetched
    result = run_py("task=image", "attention=softmax", "trainer=debug", "trainer.fast_dev_run=1", "task.batch_size=4",
                    f"data_dir={out}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "completed"


def test_file_mirror_without_ranges(files, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "cifar-10-python.tar.gz").write_bytes(files["cifar-10-python.tar.gz"])
    pin(monkeypatch, files)
    assert cli(["fetch", "image", "--out", str(tmp_path / "data"), "--mirror", mirror.as_uri()]) == 0
    assert (tmp_path / "data" / "image" / "manifest.json").is_file()


@pytest.mark.parametrize("task, override, message", [
    ("listops", "task.data.generate.close_brackets=false",
     "with task.data.generate.close_brackets=True, but this config asks for close_brackets=False"),
    ("pathfinder", "task.data.generate.contour_length=6",
     "with task.data.generate.contour_length=14, but this config asks for contour_length=6"),
])
def test_fetched_data_refuses_a_generator_option_it_was_not_made_with(task, override, message, fetched):
    """Before, the release's hard Pathfinder trained as contour_length=6 (and its ListOps as bracket-free) silently,
    the record filed under the option the data does not have."""
    from lra.build import task_module
    from lra_base.errors import UserError
    from tests.lra.conftest import compose_run

    root = fetched[0] / "official"
    assert json.loads((root / "listops" / "manifest.json").read_text())["source"]["close_brackets"] is True
    task_module(task).DataModule(compose_run([f"task={task}", f"data_dir={root}"])).prepare_data()  # as made
    with pytest.raises(UserError, match=message):
        task_module(task).DataModule(compose_run([f"task={task}", f"data_dir={root}", override])).prepare_data()


def test_an_official_folder_gets_no_generated_data_before_or_after_a_fetch(files, tmp_path, monkeypatch, capsys):
    """run.py with data_dir=<out>/official before any fetch generated ListOps there, and fetch then took it for the
    release ("already prepared")."""
    from data_prep import listops
    from lra.tasks.listops import DataModule
    from lra_base.errors import UserError
    from tests.lra.conftest import compose_run

    official = tmp_path / "data" / "official"
    with pytest.raises(UserError, match="a folder of the LRA release's official splits"):
        DataModule(compose_run(["task=listops", f"data_dir={official}"])).prepare_data()
    assert not official.exists()
    listops.generate(official, train=20, val=4, test=4, min_length=5, max_length=40, log=lambda _: None)
    pin(monkeypatch, files)
    assert cli(["fetch", "listops", "--out", str(tmp_path / "data"), "--mirror", closed_port_url()]) == 2
    assert "holds generated listops data, not the release's official split" in capsys.readouterr().err
