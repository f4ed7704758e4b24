{{- define "phalanx.name" -}}phalanx-operator{{- end -}}
{{- define "phalanx.fullname" -}}{{ .Release.Name }}-operator{{- end -}}
{{- define "phalanx.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "phalanx.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{- define "phalanx.leaseName" -}}{{ default (printf "%s-leader" (include "phalanx.fullname" .)) .Values.leaderElection.leaseName }}{{- end -}}
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
{{- /* A policy entry's rules as the admission policy's CEL variables (JSON literals), exactly as
operator/phalanx/policy/admission.py policy_variables: one per rule, sorted by name; a rule the
entry leaves out takes the operator's default ("phalanx.policyDefaults", generated from
operator/phalanx/api/policy.py); null means any / no limit. */ -}}
{{- define "phalanx.policyVariables" -}}
{{- $r := . -}}
{{- range $key, $default := include "phalanx.policyDefaults" . | fromJson }}
{{- $value := ternary (get $r $key) $default (hasKey $r $key) }}
{{- if eq $key "allowedCheckpointStorage" }}
- {name: {{ $key }}, expression: {{ printf "dyn(%s)" (include "phalanx.storageGrants" $value) | squote }}}
{{- else }}
- {name: {{ $key }}, expression: {{ printf "dyn(%s)" ($value | toJson) | squote }}}
{{- end }}
{{- end }}
{{- end -}}
{{- /* allowedCheckpointStorage's grants with every field present and each value dyn(): the API
server's CEL refuses a map literal whose values differ in type (policy_variables: storage_grants_cel). */ -}}
{{- define "phalanx.storageGrants" -}}
[{{- range $i, $g := . }}{{ if $i }},{{ end }}{"uri":dyn({{ $g.uri | toJson }}),"endpoint":dyn({{ if and (hasKey $g "endpoint") $g.endpoint }}{{ $g.endpoint | toJson }}{{ else }}null{{ end }}),"credentialsSecrets":dyn({{ (get $g "credentialsSecrets" | default list) | toJson }})}{{- end }}]
{{- end -}}
