from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from gpu_remediation.temporal_setup import register_search_attributes


async def test_both_servers_have_the_search_attributes(
    ts_client: Client, dev_client: Client
) -> None:
    await register_search_attributes(dev_client)  # idempotent on a server that has them
    for client in (dev_client,):
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        assert {k.name for k in ALL_SEARCH_ATTRIBUTES} <= set(listed.custom_attributes)
