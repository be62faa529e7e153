"""What the suite's conftest sets up for itself and for every process it starts."""

import subprocess
import sys


def test_the_suite_and_the_processes_it_starts_cache_bytecode():
    """Even where the environment sets PYTHONDONTWRITEBYTECODE: otherwise each `python -m bertkit.cli ...` the
    suite starts compiles all of bertkit it imports again (conftest says what that cost)."""
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"], capture_output=True,
                           text=True, check=True)
    assert child.stdout.strip() == "False"
    assert not sys.dont_write_bytecode
