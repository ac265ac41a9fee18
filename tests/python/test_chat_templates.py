"""Chat templates against jinja2 (issue 3 item 3): the real models' own templates (read from
the GGUF files at test time) and the committed fixtures regenerated with jinja2 now."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_real_model_templates_render_as_jinja2():
    r = subprocess.run([sys.executable, str(ROOT / "tests/chat/check_real_templates.py"),
                        "--render-bin", str(ROOT / "build/tests/chat/render_template")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_committed_expectations_equal_jinja2_today():
    r = subprocess.run([sys.executable, str(ROOT / "tools/make_chat_fixtures.py"), "--check"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
