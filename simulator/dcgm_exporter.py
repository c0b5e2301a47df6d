"""dcgm-exporter's ``/metrics`` for a simulated fleet: what a real Prometheus scrapes.

A cluster runs one dcgm-exporter per GPU node (a DaemonSet of the GPU operator); here
one endpoint serves every node's series, each carrying its node in ``Hostname`` as
dcgm-exporter writes it. The label set (``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``) is dcgm-exporter's, as its
documentation's sample output shows; the fields are the three the shipped alert rules
read (deploy/monitoring/prometheus-rule.yaml):

- ``DCGM_FI_DEV_XID_ERRORS`` (gauge): the Xid of the GPU's newest Xid fault present, 0
  when none. Simplification: the real field keeps the last Xid after the fault is gone
  (the rule's ``changes()`` is what stops an old one from firing); here it drops to 0.
- ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (gauge): 1 while a row-remap failure is present.
- ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` (counter): row-remap faults the GPU has
  had since the exporter started (never falls).

Which series a Prometheus stores with which ``job`` and ``namespace`` is its scrape
configuration's business (target labels), not the exporter's.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from simulator.fleet.faults import FaultKind
from simulator.fleet.model import Phase
from simulator.fleet.ports import FleetCore

MODEL_NAME = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.127.05"
FIELDS = (
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
)
_REMAP_KINDS = frozenset({FaultKind.ROW_REMAP_PENDING, FaultKind.ROW_REMAP_FAILURE})


def gpu_uuid(node: str, gpu: int) -> str:
    """A stable GPU UUID for ``gpu`` of ``node``, in NVIDIA's format."""
    digest = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


class DcgmExporter:
    """An HTTP server answering ``GET /metrics`` with the fleet's DCGM fields.

    Use as a context manager, or ``start()`` and ``stop()``. ``url`` is the scrape
    target (``host:port``).
    """

    def __init__(self, fleet: FleetCore, host: str = "127.0.0.1", port: int = 0) -> None:
        self._fleet = fleet
        self._host = host
        self._remaps: Counter[tuple[str, int]] = Counter()
        self._seen: set[int] = set()
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # scrapes every second would flood the test output

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dcgm-exporter", daemon=True
        )

    @property
    def target(self) -> str:
        """``host:port`` for a scrape configuration."""
        return f"{self._host}:{self._server.server_port}"

    def start(self) -> DcgmExporter:
        """Serve in a thread of its own."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> DcgmExporter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def render(self) -> str:
        """The exposition text of every running node's GPUs, in node order."""
        rows: dict[str, list[str]] = {name: [] for name, _, _ in FIELDS}
        with self._fleet.lock:
            nodes = sorted(
                (n for n in self._fleet.nodes.values() if n.phase is not Phase.GONE),
                key=lambda n: n.name,
            )
            for node in nodes:
                xids: dict[int, tuple[float, int]] = {}
                failed: set[int] = set()
                for fault in node.faults:
                    if fault.gpu is None:
                        continue
                    if fault.xid is not None and fault.since >= xids.get(fault.gpu, (-1.0, 0))[0]:
                        xids[fault.gpu] = (fault.since, fault.xid)
                    if fault.kind is FaultKind.ROW_REMAP_FAILURE:
                        failed.add(fault.gpu)
                    if fault.kind in _REMAP_KINDS:
                        with self._lock:
                            if fault.id not in self._seen:
                                self._seen.add(fault.id)
                                self._remaps[(node.name, fault.gpu)] += 1
                for gpu in range(node.gpus):
                    labels = (
                        f'gpu="{gpu}",UUID="{gpu_uuid(node.name, gpu)}",'
                        f'pci_bus_id="00000000:{0x18 + gpu * 0x10:02X}:00.0",'
                        f'device="nvidia{gpu}",modelName="{MODEL_NAME}",'
                        f'Hostname="{node.name}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
                    )
                    rows["DCGM_FI_DEV_XID_ERRORS"].append(
                        f"{{{labels}}} {xids.get(gpu, (0, 0))[1]}"
                    )
                    rows["DCGM_FI_DEV_ROW_REMAP_FAILURE"].append(
                        f"{{{labels}}} {1 if gpu in failed else 0}"
                    )
                    with self._lock:
                        remaps = self._remaps[(node.name, gpu)]
                    rows["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"].append(f"{{{labels}}} {remaps}")
        lines: list[str] = []
        for name, kind, help_text in FIELDS:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{row}" for row in rows[name])
        return "\n".join(lines) + "\n"
