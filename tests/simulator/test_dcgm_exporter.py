"""The fleet's dcgm-exporter endpoint: every GPU's series in the exposition format,
labelled as dcgm-exporter labels them, with the values of the faults present."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.dcgm_exporter import DcgmExporter, gpu_uuid
from simulator.fleet import Fleet, FleetConfig, PoolSpec


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    fleet = Fleet(FleetConfig(pools=[PoolSpec(name="h100", nodes=2)], time_factor=1.0, seed=1))
    fleet.start()
    yield fleet
    fleet.stop()


def _scrape(exporter: DcgmExporter) -> dict[str, dict[tuple[str, str], float]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{exporter.target}/metrics", timeout=5) as response:
        text = response.read().decode()
    values: dict[str, dict[tuple[str, str], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.labels["Hostname"], sample.labels["gpu"])
            values.setdefault(sample.name.removesuffix("_total"), {})[key] = sample.value
    return values


def test_every_gpu_has_each_field_labelled_as_dcgm_exporter_does(fleet: Fleet) -> None:
    with DcgmExporter(fleet) as exporter:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{exporter.target}/metrics", timeout=5) as response:
            families = list(text_string_to_metric_families(response.read().decode()))
    assert {f.name for f in families} >= {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}
    xid = next(f for f in families if f.name == "DCGM_FI_DEV_XID_ERRORS")
    assert len(xid.samples) == 2 * 8
    first = xid.samples[0]
    assert set(first.labels) == {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
    }
    assert first.labels["UUID"] == gpu_uuid(first.labels["Hostname"], 0)
    assert all(s.value == 0 for s in xid.samples)


def test_a_fault_shows_on_its_gpu_only(fleet: Fleet) -> None:
    with DcgmExporter(fleet) as exporter:
        fleet.inject("fallen_off_bus", "h100-0001", gpu=5)
        fleet.inject("row_remap_failure", "h100-0000", gpu=2)
        values = _scrape(exporter)
        again = _scrape(exporter)
    xids = {key: v for key, v in values["DCGM_FI_DEV_XID_ERRORS"].items() if v}
    assert xids == {("h100-0001", "5"): 79, ("h100-0000", "2"): 64}  # a remap failure is Xid 64
    failures = {key for key, v in values["DCGM_FI_DEV_ROW_REMAP_FAILURE"].items() if v}
    assert failures == {("h100-0000", "2")}
    remapped = {k: v for k, v in again["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"].items() if v}
    assert remapped == {("h100-0000", "2"): 1}  # counted once, however often scraped


def test_only_metrics_is_served(fleet: Fleet) -> None:
    with DcgmExporter(fleet) as exporter:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open(f"http://{exporter.target}/other", timeout=5)
    assert err.value.code == 404
