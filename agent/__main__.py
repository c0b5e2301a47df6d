"""``python -m agent``: the same as the ``remediate-agent`` command."""

from agent.cli import app

if __name__ == "__main__":
    app()
