"""The README's two opening commands stay true: CI runs the test command verbatim."""

from __future__ import annotations

import re

from conftest import REPO


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)[:2]


def test_ci_runs_the_readme_test_command() -> None:
    main_job, tests = _readme_commands()
    assert "st-magnitude ablation --preset quick" in main_job and "pip install" in main_job
    assert "pytest" in tests
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests.strip() in [line.strip() for line in ci_lines]


def test_ci_installs_cpu_torch_first() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 &&" in ci


def test_cli_help_lists_every_subcommand_without_heavy_imports() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from st_magnitude.cli import build_parser; build_parser('').format_help(); "
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'mteb', 'faiss') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from st_magnitude.cli import SUBCOMMANDS, build_parser

    help_text = build_parser("").format_help()
    assert all(name in help_text for name in SUBCOMMANDS)
