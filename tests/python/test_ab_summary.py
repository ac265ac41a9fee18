"""bench/cuda/ab_summary.py reads the tok/s that ab-speed.sh keeps of `ember bench speed`'s real
output (the tg line as the binary prints it), groups the rounds by format and run spec, and
states each spec's mean against the format's first; a run without a tok/s is counted, not hidden."""
import subprocess
import sys

from conftest import ROOT, ember_binary

sys.path.insert(0, str(ROOT / "bench" / "cuda"))
import ab_summary  # noqa: E402

MODEL = ROOT / "tests" / "fixtures" / "models" / "llama3" / "hf"


def tg_line():
    r = subprocess.run([str(ember_binary()), "bench", "speed", "-m", str(MODEL), "-t", "1", "-p", "4", "-n", "4",
                        "-r", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("tg4:")]
    assert len(lines) == 1, r.stdout
    return lines[0]


def test_groups_rounds_against_the_first_spec():
    real = tg_line()  # (as ab-speed.sh writes it: "... rc=0 <the tg line> (N s)")
    real_tps = float(real.split()[1])
    rows = ab_summary.summarize([
        "NVIDIA H200, 1980 MHz, 1980 MHz, 3201 MHz",
        f"int4 ember round 1: rc=0 {real} (3 s)",
        "int4 ember:EMBER_X=1 round 1: rc=0 tg256: 110.00 tok/s (6 s)",
        "int4 ember round 2: rc=0 tg256: 100.00 tok/s (9 s)",
        "int4 ember:EMBER_X=1 round 2: rc=1  (12 s)",
        "fp8 ember round 1: rc=0 tg256: 50.00 tok/s (15 s)",
    ])
    assert len(rows) == 3, rows
    mean = (real_tps + 100.0) / 2
    assert rows[0].split()[:2] == ["int4", "ember"] and f"mean {mean:8.2f}" in rows[0] and "+0.00%" in rows[0], rows
    assert f"{(110.0 / mean - 1) * 100:+.2f}%" in rows[1] and "1 without a tok/s" in rows[1], rows
    assert rows[2].split()[:2] == ["fp8", "ember"] and "+0.00%" in rows[2], rows
