"""Write deploy/ from the Helm chart: ``python -m tests.deploy.make_manifests``.

The chart (charts/gpu-remediation) is the one source of the manifests; deploy/
holds its render for ``kubectl apply -k`` users. tests/deploy/test_chart.py fails
when the two differ.
"""

from __future__ import annotations

from tests.deploy.chart_support import DEPLOY, deploy_files


def main() -> None:
    for target, text in deploy_files().items():
        path = DEPLOY / target
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote deploy/{target}")


if __name__ == "__main__":
    main()
