"""A stand-in for `nvidia-smi` (this machine has no GPU, so no driver tool): answers the
`--query-gpu=` questions the serving checks ask (validators/serving.py) for `gpus` GPUs of
driver 550 with no ECC error or row remap. Put its directory first on PATH."""

from __future__ import annotations

import json
import stat
import sys


def fake_nvidia_smi(bin_dir, gpus: int) -> None:
    answers = {
        "index,driver_version": "".join(f"{i}, 550.90.07\n" for i in range(gpus)),
        "index,ecc.errors.uncorrected.volatile.total": "".join(f"{i}, 0\n" for i in range(gpus)),
        "index,remapped_rows.pending,remapped_rows.failure": "".join(
            f"{i}, No, No\n" for i in range(gpus)
        ),
    }
    exe = bin_dir / "nvidia-smi"
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"answers = json.loads({json.dumps(json.dumps(answers))})\n"
        "q = [a for a in sys.argv[1:] if a.startswith('--query-gpu=')][0].split('=', 1)[1]\n"
        "sys.stdout.write(answers[q])\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
