"""Resumable HTTP download into ``<file>.part``, and the checks of a downloaded file.

``download`` brings ``part`` to the whole file at ``url``: what ``part`` already holds is kept and the rest asked for
with an HTTP ``Range`` request (a server that answers 200 instead sends the whole file, which replaces it). Every
read waits at most ``timeout`` seconds. A cut connection keeps the bytes received, so the next call continues; a
refused connection, a host that cannot be resolved, an HTTP error or a stall raise ``FetchFailed`` in one line and
write nothing. ``check_file`` compares a whole file's size and checksum with the pinned ones. The caller renames
``part`` to its final name only once every check passed (``data_prep.fetch``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from data_prep.compact import DataError
from lra_base.atomic import refuse_link

CHUNK = 1 << 20
USER_AGENT = "lra-suite-data-prep-fetch"
NETWORK_ERRORS = (OSError, http.client.HTTPException)  # URLError, TimeoutError, ConnectionError are OSErrors
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # writing the part file, not the network


class FetchFailed(DataError):
    """A download or its checks failed; the message is one line naming the URL or file and what to do."""


class WrongFile(FetchFailed):
    """The file has (or the server offers) another size or checksum than the pinned ones: not the official file."""


def reason(err: BaseException) -> str:
    """A short description of a network error: ``Connection refused``, ``timed out``, ``HTTP 404 Not Found``."""
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError) and not isinstance(err.reason, str):
        err = err.reason
    if isinstance(err, TimeoutError):
        return "timed out (no data within the timeout)"
    text = getattr(err, "strerror", None) or getattr(err, "reason", None) or str(err) or type(err).__name__
    return str(text).rstrip(".")


def content_range(header: str | None) -> tuple[int | None, int | None]:
    """``(first byte, total)`` of a ``Content-Range: bytes a-b/N`` (or ``bytes */N``) header; None where absent."""
    match = re.fullmatch(r"\s*bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)\s*", header or "")
    if not match:
        return None, None
    first, total = match.groups()
    return (int(first) if first else None), (int(total) if total and total != "*" else None)


def request(url: str, start: int, timeout: float):
    """The open response for ``url`` from byte ``start``; ``None`` when the server says ``start`` is the end."""
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and start:  # nothing left after ``start``: complete when that is the file's length
            _, total = content_range(err.headers.get("Content-Range"))
            if total == start:
                return None
        raise


def offered(response, start: int) -> tuple[int, int | None]:
    """``(first byte, total length)`` of what ``response`` sends: 206 continues at ``start``, 200 starts at 0."""
    status = response.status or 200  # a file:// response has no status
    length = response.headers.get("Content-Length")
    if status == 206:
        first, total = content_range(response.headers.get("Content-Range"))
        return (first if first is not None else -1), total
    return 0, (int(length) if length and length.isdigit() else None)


@contextlib.contextmanager
def progress(total: int | None, initial: int, label: str) -> Iterator[Callable[[int], object]]:
    """An ``update(bytes)`` function that draws a progress bar on a terminal (tqdm, which comes with Lightning)."""
    try:
        from tqdm import tqdm
    except ImportError:  # no bar without tqdm; the downloads work the same
        yield lambda count: None
        return
    with tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
              disable=None, file=sys.stderr, leave=False) as bar:  # disable=None: only on a terminal
        yield bar.update


def download(url: str, part: Path, *, size: int | None, timeout: float, expected: str,
             log: Callable[[str], None] = print) -> None:
    """Make ``part`` the whole file at ``url``, continuing what it holds.

    ``size``: the pinned length (None when unknown); ``expected``: how the file is pinned, for messages.
    ``FetchFailed`` (one line) when the host cannot be reached, answers with an error, stalls past ``timeout`` or
    cuts the connection (the bytes received stay in ``part`` for the next call); ``WrongFile`` when it offers or
    sends another length than ``size`` (``part`` is then removed)."""
    part = Path(part)
    refuse_link(part)
    start = part.stat().st_size if part.exists() else 0
    if size is not None and start > size:  # longer than the file: not a piece of it
        part.unlink()
        start = 0
    if size is not None and start == size:
        return
    for _attempt in (1, 2):
        try:
            response = request(url, start, timeout)
        except NETWORK_ERRORS as err:
            why = reason(err)
            plain = isinstance(err, urllib.error.HTTPError) or why.startswith("timed out")
            raise FetchFailed(f"{url}: {why if plain else f'cannot connect ({why})'}") from None
        if response is None:
            return
        first, total = offered(response, start)
        if first in (0, start):
            break
        response.close()  # a 206 from another byte: start again from the beginning
        part.unlink(missing_ok=True)
        start = 0
    else:
        raise FetchFailed(f"{url}: the server answered a request from byte 0 with another byte range")
    with response:
        if first == 0 and start:
            log(f"{url}: the server does not resume downloads (it sent the whole file); starting again")
            part.unlink()
            start = 0
        if size is not None and total is not None and total != size:
            part.unlink(missing_ok=True)
            raise WrongFile(f"{url} offers {total} bytes, but the official file has {expected}: this is not "
                            f"that file")
        receive(response, part, start, total, size, url, timeout)


def receive(response, part: Path, start: int, total: int | None, size: int | None, url: str, timeout: float) -> None:
    """Append the body of ``response`` to ``part`` (which holds ``start`` bytes)."""
    got = start
    try:
        with open(part, "ab") as f, progress(total, start, part.name.removesuffix(".part")) as update:
            read = getattr(response, "read1", response.read)  # what has arrived, not a full chunk: a stall keeps it
            try:
                while chunk := read(CHUNK):
                    f.write(chunk)
                    got += len(chunk)
                    update(len(chunk))
                    if size is not None and got > size:
                        raise WrongFile(f"{url} sent more than the official {size} bytes: this is not that file")
            finally:
                f.flush()
                os.fsync(f.fileno())
    except WrongFile:
        part.unlink(missing_ok=True)
        raise
    except NETWORK_ERRORS as err:
        if isinstance(err, OSError) and err.errno in DISK_ERRORS:
            raise FetchFailed(f"{part}: cannot be written ({reason(err)}) after {got} bytes of {url}; what it holds "
                              f"is kept: free space there (or give another --out), then run the same command again "
                              f"to continue") from None
        raise cut(url, part, got, total, reason(err), timeout) from None
    if total is not None and got < total:
        raise cut(url, part, got, total, "the connection closed early", timeout)
    if got == 0:
        part.unlink(missing_ok=True)
        raise WrongFile(f"{url}: the server sent an empty file")


def cut(url: str, part: Path, got: int, total: int | None, why: str, timeout: float) -> FetchFailed:
    """The error of a download cut after ``got`` bytes; ``part`` keeps them (or is removed when empty)."""
    if got == 0:
        part.unlink(missing_ok=True)
        return FetchFailed(f"{url}: {why}; nothing was received")
    of = f" of {total}" if total is not None else ""
    return FetchFailed(f"{url}: {why} after {got}{of} bytes; they are kept in {part}: run the same command again to "
                       f"continue the download (each read waits at most {timeout:g} s: --timeout)")


def digest(path: Path, algorithm: str) -> str:
    """The hex ``algorithm`` digest of the file ``path``, read in chunks."""
    hasher = hashlib.new(algorithm)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def check_file(path: Path, size: int | None, checksum: tuple[str, str] | None, what: str) -> None:
    """``FetchFailed`` naming expected and got when ``path``'s size or checksum is not the pinned one."""
    got_size = path.stat().st_size
    if size is not None and got_size != size:
        pinned = f"; {checksum[0]} {checksum[1]}" if checksum else ""
        raise WrongFile(f"{what}: {got_size} bytes, expected {size}{pinned}")
    if checksum is not None:
        algorithm, expected = checksum
        got = digest(path, algorithm)
        if got != expected.lower():
            raise WrongFile(f"{what}: {algorithm} expected {expected}, got {got}")
