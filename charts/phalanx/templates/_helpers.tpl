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
operator/phalanx/policy/admission.py policy_variables; a missing key takes the operator's default
(operator/phalanx/api/policy.py); null means any / no limit. */ -}}
{{- define "phalanx.policyVariables" -}}
{{- $r := . -}}
{{- $cp := list "node-role.kubernetes.io/control-plane" "node-role.kubernetes.io/master" -}}
{{- $secrets := ternary $r.allowSecrets false (hasKey $r "allowSecrets") -}}
{{- $volumes := ternary $r.allowedVolumeTypes (list "persistentVolumeClaim" "configMap" "emptyDir" "csi" "ephemeral" "nfs") (hasKey $r "allowedVolumeTypes") -}}
- {name: allowedVolumes, expression: {{ printf "dyn(%s)" (concat $volumes (ternary (list "secret") list $secrets) | toJson) | squote }}}
- {name: allowSecrets, expression: {{ printf "dyn(%s)" ($secrets | toJson) | squote }}}
- {name: allowedServiceAccounts, expression: {{ printf "dyn(%s)" ($r.allowedServiceAccounts | default list | toJson) | squote }}}
- {name: allowedPriorityClasses, expression: {{ printf "dyn(%s)" (ternary ($r.allowedPriorityClasses | default list | toJson) "null" (hasKey $r "allowedPriorityClasses")) | squote }}}
- {name: allowedSchedulerNames, expression: {{ printf "dyn(%s)" ($r.allowedSchedulerNames | default list | toJson) | squote }}}
- {name: forbiddenNodeSelectorKeys, expression: {{ printf "dyn(%s)" (ternary $r.forbiddenNodeSelectorKeys $cp (hasKey $r "forbiddenNodeSelectorKeys") | toJson) | squote }}}
- {name: forbiddenTolerationKeys, expression: {{ printf "dyn(%s)" (ternary $r.forbiddenTolerationKeys $cp (hasKey $r "forbiddenTolerationKeys") | toJson) | squote }}}
- {name: allowKeylessTolerations, expression: {{ printf "dyn(%s)" (ternary $r.allowKeylessTolerations false (hasKey $r "allowKeylessTolerations") | toJson) | squote }}}
- {name: allowedNetworkProfiles, expression: {{ printf "dyn(%s)" (ternary ($r.allowedNetworkProfiles | default list | toJson) "null" (hasKey $r "allowedNetworkProfiles")) | squote }}}
- {name: maxNodes, expression: {{ printf "dyn(%s)" (ternary (toJson $r.maxNodes) "null" (hasKey $r "maxNodes")) | squote }}}
- {name: maxRestarts, expression: {{ printf "dyn(%s)" (ternary (toJson $r.maxRestarts) "null" (hasKey $r "maxRestarts")) | squote }}}
- {name: minRestartBackoffSeconds, expression: {{ printf "dyn(%s)" (ternary (toJson $r.minRestartBackoffSeconds) "0" (hasKey $r "minRestartBackoffSeconds")) | squote }}}
{{- end -}}
