"""The one atomic writer (``lra_base.atomic``): a write that raises leaves the old file (or none) and no temporary
file; figures go through it too; it loads without torch."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from lra_base.atomic import LinkRefused, TooLarge, atomic_output, read_regular, save_figure, write_atomic
from tests.lra.conftest import ROOT, torchless_env


class FigureThatFailsHalfway:
    """A figure whose ``savefig`` writes part of its bytes, then hits a full disk."""

    def savefig(self, file, format=None, **options):
        file.write(b"\x89PNG\r\n\x1a\n half a picture")
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_write_that_raises_leaves_the_old_file_and_no_partial_one(tmp_path):
    path = tmp_path / "table.csv"
    write_atomic(path, "a,b\n1,2\n")
    with pytest.raises(RuntimeError), atomic_output(path, "w") as f:
        f.write("a,b\n3,")
        raise RuntimeError("crash while writing")
    assert path.read_text() == "a,b\n1,2\n"
    with pytest.raises(OSError, match="No space left"):
        save_figure(FigureThatFailsHalfway(), tmp_path / "plot.png")
    with pytest.raises(OSError, match="No space left"):
        save_figure(FigureThatFailsHalfway(), path)
    assert path.read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]  # no plot.png, no .tmp left


def test_save_figure_writes_the_format_its_suffix_names(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    png = save_figure(fig, tmp_path / "deep" / "plot.png", dpi=50)
    svg = save_figure(fig, tmp_path / "deep" / "plot.svg")
    plt.close(fig)
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert b"<svg" in svg.read_bytes()[:2000]
    assert sorted(p.name for p in png.parent.iterdir()) == ["plot.png", "plot.svg"]


def test_links_are_refused_and_a_size_limit_is_kept(tmp_path):
    target = write_atomic(tmp_path / "target.json", b"{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(LinkRefused, match=f"{link} is a symbolic link"):
        write_atomic(link, "{}")
    with pytest.raises(LinkRefused) as refused:
        read_regular(link)
    assert refused.value.what.startswith("a symbolic link (to ")
    assert read_regular(target, limit=2) == b"{}"
    with pytest.raises(TooLarge, match="2 bytes, over the 1-byte limit"):
        read_regular(target, limit=1)


def test_the_writer_loads_without_torch(tmp_path):
    """``data_prep`` and ``results`` import it; torch must not come with it."""
    done = subprocess.run([sys.executable, "-c", "import lra_base.atomic, data_prep.compact, results.safe_read"],
                          cwd=ROOT, env=torchless_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
