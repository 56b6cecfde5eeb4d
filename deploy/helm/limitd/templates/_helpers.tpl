{{- define "limitd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "limitd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "limitd.labels" -}}
{{ include "limitd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The Secret holding LIMITD_ADMIN_TOKEN: the one named, or the chart's. */}}
{{- define "limitd.adminSecret" -}}
{{- if .Values.adminToken.existingSecret.name -}}
{{- .Values.adminToken.existingSecret.name -}}
{{- else if .Values.adminToken.value -}}
{{- printf "%s-admin" (include "limitd.fullname" .) -}}
{{- else -}}
{{- fail "adminToken: set adminToken.existingSecret.name (a Secret you created) or adminToken.value: limitd refuses to listen beyond loopback without LIMITD_ADMIN_TOKEN" -}}
{{- end -}}
{{- end -}}

{{/* Values that contradict each other stop the render, naming them. */}}
{{- define "limitd.validate" -}}
{{- $_ := include "limitd.adminSecret" . -}}
{{- if and .Values.redis.url .Values.redis.existingSecret.name -}}
{{- fail "redis: set redis.url or redis.existingSecret.name, not both" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not (or .Values.redis.url .Values.redis.existingSecret.name)) -}}
{{- fail "redis: with replicaCount above 1 set redis.url or redis.existingSecret.name: without a Redis each replica keeps limits of its own" -}}
{{- end -}}
{{- if and .Values.adminToken.value .Values.adminToken.existingSecret.name -}}
{{- fail "adminToken: set adminToken.existingSecret.name or adminToken.value, not both" -}}
{{- end -}}
{{- end -}}
