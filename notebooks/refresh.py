"""Execute the notebooks and save them with their outputs (plots, videos), as they are
committed: ``python notebooks/refresh.py [NAME.ipynb ...]``. Each runs in a fresh kernel
in a temporary directory, so the files it writes (runs, videos) stay out of the repository.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def refresh(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": workdir}}
        )
        client.execute()
    nbformat.write(nb, path)
    print(f"{path.name}: executed in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.name for p in HERE.glob("*.ipynb"))
    for name in names:
        refresh(HERE / name)
