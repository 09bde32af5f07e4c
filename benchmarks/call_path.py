"""The call stack from ``spectune study run`` to the first verified step: frames and modules of spectune's own.

    python benchmarks/call_path.py [STUDY]   (default studies/quickstart.yaml; one worker, in this process)

Runs the study for a few trials with a profile hook that, at the first call of the verification itself
(the CPU twin's ``count_emitted_banked`` / ``rejection_sample_banked``, or the host step of the kernel
verifier), prints the stack's frames inside this repository: how deep the path from the CLI to a verified
step is, and through which modules.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERIFY = {"rejection_sample_banked", "count_emitted_banked", "host_step"}


def main() -> None:
    study = sys.argv[1] if len(sys.argv) > 1 else "studies/quickstart.yaml"
    printed: list[bool] = []

    def hook(frame, event, arg) -> None:  # type: ignore[no-untyped-def]
        if printed or event != "call" or frame.f_code.co_name not in VERIFY:
            return
        if not frame.f_code.co_filename.endswith("kernels/reference.py"):
            return
        own = [
            f
            for f in traceback.extract_stack(frame)
            if f.filename.startswith(str(REPO)) and "site-packages" not in f.filename and "benchmarks" not in f.filename
        ]
        modules = dict.fromkeys(Path(f.filename).relative_to(REPO).as_posix() for f in own)
        print(f"{len(own)} frames in {len(modules)} modules", file=sys.stderr)
        for f in own:
            print(f"  {Path(f.filename).relative_to(REPO)}:{f.lineno} {f.name}", file=sys.stderr)
        printed.append(True)

    sys.setprofile(hook)
    threading.setprofile(hook)
    with tempfile.TemporaryDirectory() as out:
        sys.argv = ["spectune", "study", "run", study, "--out", out, "--n-trials", "4", "--no-progress"]
        from spectune._launch import main as spectune_main

        try:
            spectune_main()
        except SystemExit:
            pass


if __name__ == "__main__":
    main()
