"""A holder evicted from the worker's cache while it holds leaves no stray coroutine.

Evicting a workflow cancels its tasks, so a holder that releases in ``finally``
(as the node workflow's replacement stage does) releases while being evicted,
when the SDK refuses to create tasks. The release's two sends were coroutines
already; dropped without being awaited, they warned ("coroutine ... was never
awaited") whenever they were garbage collected, often during a later test.
"""

from __future__ import annotations

import gc
import warnings

from temporalio.client import Client

from tests.conftest import assert_eventually
from tests.workflows.semaphore_holders import SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    end_semaphore_test,
    holder_ids,
    holder_status,
    new_semaphore_id,
    semaphore_state,
    semaphore_worker,
    start_holder,
    start_semaphore,
)


async def test_a_holder_evicted_while_it_holds_leaves_no_unawaited_coroutine(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # No cache: the worker evicts every workflow after each of its tasks.
        async with semaphore_worker(dev_client, task_queue, max_cached_workflows=0):
            await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
            # It holds until told, and releases in ``finally``.
            holder = await start_holder(dev_client, task_queue, semaphore_id, "held", hold=None)
            await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
            await holder.signal(SemaphoreHolderWorkflow.finish)
            report = await holder.result()
            await assert_eventually(
                lambda: semaphore_state(dev_client, semaphore_id), lambda s: holder_ids(s) == []
            )
        gc.collect()
    assert report.acquired
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert unawaited == []
    await end_semaphore_test(dev_client, semaphore_id, {"held": holder})
