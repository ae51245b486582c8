"""Install pip into the running interpreter (a virtual environment made with ``--without-pip``) using the
standard library only.

Stock Debian 12 / Ubuntu 24.04 ship Python without ``ensurepip`` unless the ``python3.X-venv`` package is
installed, so ``python3 -m venv`` cannot put pip into the environment.  This script downloads the newest
pip wheel from the package index (``$PIP_INDEX_URL``, else https://pypi.org/simple), checks its SHA-256
against the index, and runs pip from the wheel itself to install it: ``python pip.whl/pip install pip.whl``.

Run as ``.venv/bin/python scripts/bootstrap_pip.py``; exit status 0 when pip is importable afterwards.
"""

from __future__ import annotations

import hashlib
import html.parser
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

DEFAULT_INDEX = "https://pypi.org/simple"
_WHEEL = re.compile(r"^pip-(\d+(?:\.\d+)*)-py3-none-any\.whl$")  # final releases only (no b1, rc1)


class _Links(html.parser.HTMLParser):
    """The ``<a href=... data-requires-python=...>`` anchors of a PEP 503 simple-index page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            a = dict(attrs)
            if a.get("href"):
                self.links.append((a["href"], a.get("data-requires-python") or ""))


def _python_ok(spec: str) -> bool:
    """True when this interpreter satisfies a simple ``>=3.X`` requirement (other forms are not refused)."""
    m = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)(?:\.\d+)?\s*", spec)
    return not m or sys.version_info[:2] >= (int(m.group(1)), int(m.group(2)))


def newest_pip_wheel(index: str) -> tuple[str, str]:
    """``(url, sha256)`` of the newest final pip wheel on the index this interpreter can run."""
    page_url = index.rstrip("/") + "/pip/"
    with urllib.request.urlopen(page_url, timeout=60) as resp:
        page = resp.read().decode("utf-8", "replace")
    parser = _Links()
    parser.feed(page)
    best = None
    for href, requires in parser.links:
        url = urllib.parse.urljoin(page_url, href)
        path, _, fragment = url.partition("#")
        m = _WHEEL.match(os.path.basename(urllib.parse.urlparse(path).path))
        if not m or not fragment.startswith("sha256=") or not _python_ok(requires):
            continue
        version = tuple(int(x) for x in m.group(1).split("."))
        if best is None or version > best[0]:
            best = (version, path, fragment[len("sha256="):])
    if best is None:
        raise RuntimeError(f"no pip wheel with a sha256 found at {page_url}")
    return best[1], best[2]


def main() -> int:
    index = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    try:
        url, sha256 = newest_pip_wheel(index)
        with urllib.request.urlopen(url, timeout=300) as resp:
            data = resp.read()
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"bootstrap_pip: cannot download pip from {index}: {exc}", file=sys.stderr)
        return 1
    if hashlib.sha256(data).hexdigest() != sha256:
        print(f"bootstrap_pip: {url} does not match its sha256 on the index; not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="tilewright-pip-") as tmp:
        wheel = os.path.join(tmp, os.path.basename(urllib.parse.urlparse(url).path))
        with open(wheel, "wb") as f:
            f.write(data)
        # a pip wheel is runnable: its pip/ folder is put on sys.path by the path "WHEEL/pip"
        cmd = [sys.executable, os.path.join(wheel, "pip"), "install", "--no-index", "--no-cache-dir",
               "--disable-pip-version-check", "-q", wheel]
        rc = subprocess.call(cmd)
    if rc != 0:
        return rc
    return subprocess.call([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    sys.exit(main())
