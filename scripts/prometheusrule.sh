#!/usr/bin/env bash
# Writes conf/ib-sriov-prometheusrule.yaml (a prometheus-operator PrometheusRule,
# monitoring.coreos.com/v1) from conf/ib-sriov-alerts.rules.yml, the plain rules file:
# the same `groups:`, indented under `spec:`. Edit the plain file, then run this;
# tests/alert_rules.rs fails when the two differ.
#
#   scripts/prometheusrule.sh          rewrite conf/ib-sriov-prometheusrule.yaml
#   scripts/prometheusrule.sh --stdout print it instead
set -euo pipefail
cd "$(dirname "$0")/.."
render() {
    cat <<'HEAD'
# The ib-sriov alerts as a prometheus-operator PrometheusRule. Generated from
# conf/ib-sriov-alerts.rules.yml by scripts/prometheusrule.sh: edit that file, not this one.
# Runbooks: docs/operations.md "Alerts". The operator picks a PrometheusRule by its labels
# (the Prometheus resource's ruleSelector, e.g. `release: <name>` with kube-prometheus-stack):
# add the label yours selects.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: ib-sriov
  namespace: kube-system
  labels:
    app: ib-sriov-exporter
spec:
HEAD
    sed -n '/^groups:/,$p' conf/ib-sriov-alerts.rules.yml | sed 's/^\(.\)/  \1/'
}
if [[ "${1:-}" == --stdout ]]; then
    render
else
    render >conf/ib-sriov-prometheusrule.yaml
fi
