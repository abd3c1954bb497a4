"""The embedded default text corpus (``--dataset text``): 57 source files of CPython's own
standard library (PSF License Agreement; the text of every Python install), read from
this interpreter's ``Lib/`` directory, so nothing is downloaded and nothing is shipped.

The files and their contents are pinned (:data:`PINS`: sha256 prefix, size, path): they are the
files that CPython 3.11.2, 3.11.7, 3.12.1 and 3.13.0 ship byte for byte alike (611,114
bytes of Python code, docstrings and comments; the per-codepage tables of ``encodings/``
left out). :func:`read_corpus` refuses, in one line that names the files and the
directory, a Python whose copies differ or lack them (a later CPython that edited one, a
distribution that strips the ``.py`` sources), so that every run of the default corpus
trains on the same bytes and the figures of docs/llm.md can be reproduced.

    >>> len(PINS), sum(size for _, size, _ in PINS)
    (57, 611114)
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig

PINNED_ON = "CPython 3.11.2, 3.11.7, 3.12.1 and 3.13.0"
LICENCE = "PSF License Agreement (CPython's standard library)"

_PINS = """
981d4c398849f9ebcab72300d9c1fe28   5218 __future__.py
3ad5d60627477a60939ee44fc1bb3a05   5681 _compression.py
cb14dd6f2e2439eb70b806cd49d19911  14653 _markupbase.py
f9c6fe3dd9b51bd7d93f867356e9d362   6189 _py_abc.py
b9388bc1d6d12ed6be12da420ab1feca   3128 _sitebuiltins.py
e1bf3dae66d0bfa63c8bb8a1d10c6112   7220 _threading_local.py
91895a451d06e9f521a1171b31b9b19b   5893 _weakrefset.py
1d1b49988c338b4ef06e30f9e92d9db2   6957 asyncio/protocols.py
c0eac37debcc51b702b808f6b7ed3e41   2475 asyncio/trsock.py
e6fcffefa2521666bc2aed0f5caf8e86   5060 asyncio/windows_utils.py
8c6d5f09f7c535d40fa1c30ebfcb35e0  22833 concurrent/futures/_base.py
d8730e360dd00ec046bdd85cae41fe83   3369 curses/__init__.py
15a052812d9ae80124bb25b3f5b9ffae   5634 curses/has_key.py
0c6afc23568d55b3e9ac914f9c5361e3  83308 difflib.py
4178321600c0a19ca04cfe8542ce4448   8541 email/_encoded_words.py
2d81026aef17e4786b15d9ec06293049  10588 email/contentmanager.py
fada56c25b6a457c6a62af43f9f929bb  20819 email/headerregistry.py
460be5b50cfcaab8e72a73f24f14ab06   3726 email/mime/image.py
77b454bd3ba3b5e3776be28ae3a0fd8d   9864 email/quoprimime.py
7bd338c5a475d1101064603d3baa5507   9656 graphlib.py
6d43277e5c76fc0f073cd388fcff852d  23024 heapq.py
3ec636fb8aeb297e1155e442d681a9d6   2895 importlib/metadata/_functools.py
72faffdaff0145bc5c225e71e6575fa9   2068 importlib/metadata/_itertools.py
1c2b0592c66924b7933f734493f9e0ac   2166 importlib/metadata/_text.py
d5d41e2c29049515d295d81a6d40b489  14020 json/__init__.py
8604d9d03786d0d509abb49e9f069337   2425 json/scanner.py
9127a40ea0ff342cb414383b5e7c594a   3061 multiprocessing/dummy/__init__.py
f6bb79bb99b9ae484935f0d68822e960  11626 multiprocessing/heap.py
0588ad0e5a36718b4377dc2a2a97864a   2230 multiprocessing/popen_forkserver.py
97b5d25aa479516894489877e6a79212   2029 multiprocessing/popen_spawn_posix.py
4999f8b9ae7b3e8a7f5de302612b4131   9512 multiprocessing/reduction.py
77ef522912474652490b7df523112858   6306 multiprocessing/sharedctypes.py
980982ba66cc403d17874369d2770e09   2887 nturl2path.py
07d224301cba312fa0697bff9cd5a4bb  60369 optparse.py
e8ca09333701ba41244e20b8c2c37b7e  11396 pyclbr.py
24aeae1f0526250f442022022bf98df9  11786 string.py
60b6c83581093029312efb6670b11c54  12917 stringprep.py
4579b04a7566452304781ccce37d3ebc  22631 tomllib/_parser.py
75b8e0e428594f6dca6bdcfd0c73977d   2943 tomllib/_re.py
c2cc84a05b824df79840c98729a0e94e  18047 tracemalloc.py
905672317ab26c656c600defce25d477   2746 unittest/_log.py
f8286e818ca56e10e03745bc056cdfd3   2403 unittest/signals.py
ed2da92bc9f97c53403ee2d3d12cc53b  13512 unittest/suite.py
fdcc640c3505d16deab9c32eae7c3f5f   5215 unittest/util.py
7e6c3b6d7a95f0d74f5968f51a87adae   2361 urllib/response.py
389b811835f9a3ba72b192c3487b0266   9424 urllib/robotparser.py
56f8d313fb74019e53eb9287400702fb  21513 weakref.py
0fbf95a47d8e4c0d831fd52312ec4307   6766 wsgiref/headers.py
b415a6f3d3663c3ac332ee4a0f4213ea   4019 xml/dom/__init__.py
826b02a803930834b96b1086cbee7db1   3451 xml/dom/domreg.py
42974c4c67803dfe80b016ff8aeea0d1   3367 xml/dom/minicompat.py
614b88673d496a360e6b10efe8d733c7  11637 xml/dom/pulldom.py
d4f33a8f018755626b64557953a91c6b  12387 xml/dom/xmlbuilder.py
ae8a80a8b51567b4f0965481682705e7  13997 xml/etree/ElementPath.py
64c7aae49f1dd382a7b9012610307bfa  15617 xml/sax/handler.py
3fe2cdb6386e0c4d42d37c657bbecb78  12255 xml/sax/saxutils.py
67deaf0ba41aa4865e00729767720748   5294 zoneinfo/_common.py
"""

#: ``(sha256, size, path relative to Lib/)`` of every file, in the corpus's order (the first
#: 128 bits of each sha256 are pinned).
PINS: tuple[tuple[str, int, str], ...] = tuple(
    (digest, int(size), path)
    for digest, size, path in (line.split() for line in _PINS.split("\n") if line)
)


def stdlib_dir() -> str:
    """This interpreter's standard library directory (``Lib/``)."""
    return sysconfig.get_paths()["stdlib"]


def mismatches(root: str) -> list[str]:
    """What differs from the pin under ``root``: one entry per file, ``path: why``."""
    out = []
    for digest, size, path in PINS:
        full = os.path.join(root, path)
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError as exc:
            out.append(f"{path}: {exc.strerror or exc}")
            continue
        if not hashlib.sha256(data).hexdigest().startswith(digest):
            out.append(f"{path}: {len(data)} bytes, not the pinned {size} (content differs)")
    return out


def read_corpus(root: str | None = None) -> list[tuple[str, bytes]]:
    """``(path, contents)`` of the pinned files under ``root`` (default: this Python's
    ``Lib/``), in pin order. Raises ValueError naming what differs and what to do."""
    root = root or stdlib_dir()
    wrong = mismatches(root)
    if wrong:
        shown = "; ".join(wrong[:3]) + ("; ..." if len(wrong) > 3 else "")
        version = ".".join(map(str, sys.version_info[:3]))
        raise ValueError(
            f"the default text corpus (--dataset text) is {len(PINS)} pinned files of "
            f"CPython's standard library as {PINNED_ON} ship them, but {len(wrong)} of them "
            f"differ in {root} (Python {version}): {shown}; train on text of your own with "
            "--dataset text:PATH (a file or a folder)"
        )
    out = []
    for _, _, path in PINS:
        with open(os.path.join(root, path), "rb") as f:
            out.append((path, f.read()))
    return out
