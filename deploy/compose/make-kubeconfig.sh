#!/bin/sh
# Writes a kubeconfig for one of gpu-remediation's service accounts, for the
# compose deployment: the current kubectl context's API server and CA, and a
# bound token of the service account (so the services get exactly the RBAC of
# deploy/rbac.yaml, and nothing of yours).
#
#   deploy/compose/make-kubeconfig.sh gpu-remediation-worker secrets/worker-kubeconfig
#   deploy/compose/make-kubeconfig.sh gpu-remediation-watcher secrets/watcher-kubeconfig
#
# The token expires after DURATION (default 720h, if the API server allows it);
# run the script again and restart the services before then.
set -eu

if [ "$#" -ne 2 ]; then
  echo "usage: $0 SERVICE_ACCOUNT OUTPUT_FILE" >&2
  exit 2
fi
account="$1"
output="$2"
namespace="${NAMESPACE:-gpu-remediation}"
duration="${DURATION:-720h}"

server="$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')"
ca="$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
if [ -z "$server" ] || [ -z "$ca" ]; then
  echo "the current kubectl context has no server or inline CA data (certificate-authority-data);" >&2
  echo "switch to a context that has both, or write the kubeconfig by hand" >&2
  exit 1
fi
token="$(kubectl -n "$namespace" create token "$account" --duration "$duration")"

umask 077
mkdir -p "$(dirname "$output")"
cat >"$output" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: cluster
    cluster:
      server: ${server}
      certificate-authority-data: ${ca}
users:
  - name: ${account}
    user:
      token: ${token}
contexts:
  - name: ${account}
    context: {cluster: cluster, user: ${account}, namespace: ${namespace}}
current-context: ${account}
KUBECONFIG
echo "wrote $output for ${namespace}/${account} (server ${server})"
