"""`ember bench speed` from the command line: decode steps take the executor's argmax by default
(as the engine runs a greedy request) or, with --host-argmax, download the logits and take the
argmax on the host; both report tg in the JSON with which one ran; --tg-after-prompt decodes
after the prompt instead of from an empty context; bad options fail."""
import json
import subprocess

from conftest import ROOT, ember_binary

MODEL = ROOT / "tests" / "fixtures" / "models" / "llama3" / "hf"


def bench_speed(*args):
    return subprocess.run([str(ember_binary()), "bench", "speed", "-m", str(MODEL), "-t", "1", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_decode_argmax_modes(tmp_path):
    for flag, want in ((None, "executor"), ("--host-argmax", "host")):
        out = tmp_path / f"{want}.json"
        r = bench_speed("-p", 8, "-n", 16, "-r", 1, "--json", out, *([flag] if flag else []))
        assert r.returncode == 0, r.stderr[-2000:]
        j = json.loads(out.read_text())
        assert j["tg"]["n"] == 16 and j["tg"]["argmax"] == want and j["tg"]["tokens_per_s"] > 0, j
        assert j["pp"]["n"] == 8 and j["pp"]["tokens_per_s"] > 0, j
        line = [l for l in r.stdout.splitlines() if l.startswith("tg16:")]
        assert len(line) == 1 and line[0].endswith("(argmax on the host)") == (want == "host"), r.stdout


def test_tg_after_prompt(tmp_path):
    out = tmp_path / "after.json"
    r = bench_speed("-p", 8, "-n", 16, "-r", 1, "--tg-after-prompt", "--json", out)
    assert r.returncode == 0, r.stderr[-2000:]
    j = json.loads(out.read_text())
    assert j["tg"]["context_start"] == 8 and j["tg"]["tokens_per_s"] > 0, j
    assert any(l.startswith("tg16:") and "(after 8 prompt tokens)" in l for l in r.stdout.splitlines()), r.stdout
    plain = tmp_path / "plain.json"
    assert bench_speed("-p", 8, "-n", 16, "-r", 1, "--json", plain).returncode == 0
    assert json.loads(plain.read_text())["tg"]["context_start"] == 0


def test_bad_options_fail():
    r = bench_speed("-n", 100000)
    assert r.returncode != 0 and "--n-gen" in r.stderr + r.stdout, r.stderr[-2000:]
