"""Run the emulator standalone: ``python -m simulator.kube_api --port 8001``."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import FrameType

from .job_controller import JobController
from .seeding import KubeStore
from .server import KubeApiServer


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted; print how to point clients at the server."""
    parser = argparse.ArgumentParser(prog="python -m simulator.kube_api", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8001, help="port (0 picks a free one)")
    parser.add_argument("--write-kubeconfig", metavar="PATH", help="write a kubeconfig here")
    parser.add_argument(
        "--history-size", type=int, default=10_000, help="changes retained for watches"
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks"
    )
    parser.add_argument(
        "--pod-grace-scale",
        type=float,
        default=0.0,
        help="real seconds per second of pod grace period (0 deletes pods at once)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)

    store = KubeStore(history_size=args.history_size, pod_grace_scale=args.pod_grace_scale)
    server = KubeApiServer(
        store, host=args.host, port=args.port, bookmark_interval=args.bookmark_interval
    ).start()
    # Users' Jobs get pods, and evictions restart them by their podFailurePolicy.
    controller = JobController(store).start()
    print(f"Kubernetes API emulator serving at {server.url}")
    print(
        "  Python: kubernetes.client.ApiClient("
        f"kubernetes.client.Configuration(host={server.url!r}))"
    )
    if args.write_kubeconfig:
        path = server.write_kubeconfig(args.write_kubeconfig)
        print(f"  kubectl: KUBECONFIG={path} kubectl get nodes")
        print(f"  Python: kubernetes.config.load_kube_config({str(path)!r})")
    else:
        print(f"  kubectl: kubectl --server={server.url} get nodes")
    print(f"  faults: POST {server.url}/_emulator/faults; log: GET {server.url}/_emulator/requests")

    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    done.wait()
    controller.stop()
    server.stop()
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
