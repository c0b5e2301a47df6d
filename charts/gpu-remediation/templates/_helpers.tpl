{{/*
The services' image: image.repository and image.tag (default: the chart's appVersion).
*/}}
{{- define "gpu-remediation.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The node agent's image (Node Problem Detector with remediate-agent, deploy/npd/Dockerfile).
*/}}
{{- define "gpu-remediation.agentImage" -}}
{{ .Values.agent.image.repository }}:{{ .Values.agent.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
A pod annotation that changes with the settings and the policy, so the Deployments
roll when either does (the kustomization gets the same from configMapGenerator's
name suffix). Empty when the chart does not own the ConfigMaps (config.create=false).
*/}}
{{- define "gpu-remediation.configChecksum" -}}
{{- if .Values.config.create -}}
checksum/config: {{ include (print $.Template.BasePath "/config.yaml") . | sha256sum }}
{{- end }}
{{- end }}
