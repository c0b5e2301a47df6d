"""``KubeApiServer.restart``: an API server restart on the address every client was given."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError

from simulator.kube_api import KubeApiServer, KubeStore


def test_a_restarted_server_answers_on_the_same_port_with_its_objects_and_fault_rules() -> None:
    store = KubeStore()
    with KubeApiServer(store) as api, api.api_client() as c:
        core = client.CoreV1Api(c)
        core.create_node({"metadata": {"name": "n1"}})
        api.faults.inject(r"^/api/v1/nodes/n2$", method="GET", status=500, times=1)
        port = api.port

        api.restart()

        assert api.port == port
        # The same client (its pooled connection was closed by the restart) reconnects.
        assert [n.metadata.name for n in core.list_node().items] == ["n1"]
        with pytest.raises(ApiException) as err:
            core.read_node("n2")
        assert err.value.status == 500
    store.close()


def test_a_restart_ends_open_watches_and_a_compacted_history_answers_410() -> None:
    store = KubeStore()
    with KubeApiServer(store, bookmark_interval=0.2) as api, api.api_client() as c:
        core = client.CoreV1Api(c)
        core.create_node({"metadata": {"name": "n1"}})
        rv = core.list_node().metadata.resource_version
        ended = threading.Event()

        broke: list[BaseException] = []

        def follow() -> None:
            try:
                with api.api_client() as own:
                    for _ in watch.Watch().stream(
                        client.CoreV1Api(own).list_node, resource_version=rv, timeout_seconds=30
                    ):
                        pass
            except (ApiException, MaxRetryError) as err:
                broke.append(err)  # reconnected to a compacted history, or while it was down
            finally:
                ended.set()

        follower = threading.Thread(target=follow)
        follower.start()
        deadline = time.monotonic() + 10
        while not any("watch=" in r.query for r in api.requests()):
            assert time.monotonic() < deadline, "the watch never opened"
            time.sleep(0.02)
        compacted: list[bool] = []

        def compact() -> None:
            store.compact()
            compacted.append(True)

        core.create_node({"metadata": {"name": "n2"}})  # the history moves past rv
        api.restart(while_down=compact)
        follower.join(timeout=10)

        assert compacted == [True]
        assert ended.is_set(), "the open watch did not end with the restart"
        assert all(getattr(e, "status", 410) == 410 for e in broke), broke
        with pytest.raises(ApiException) as err:
            list(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=1))
        assert err.value.status == 410
    store.close()


def test_restarting_a_server_that_never_started_is_refused() -> None:
    api = KubeApiServer(KubeStore())

    with pytest.raises(RuntimeError, match="not started"):
        api.restart()
