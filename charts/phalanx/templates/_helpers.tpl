{{- define "phalanx.name" -}}phalanx-operator{{- end -}}
{{- define "phalanx.fullname" -}}{{ .Release.Name }}-operator{{- end -}}
{{- define "phalanx.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "phalanx.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{- define "phalanx.labels" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "phalanx.selector" -}}
app.kubernetes.io/name: {{ include "phalanx.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
