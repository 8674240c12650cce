{{/*
The chart renders config/'s manifests (see templates/manifests.yaml); these helpers are its parts.
*/}}

{{/* The labels Helm's own tooling expects on every object (not on selectors or pod templates). */}}
{{- define "torchrun-controller.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The files of config/ this release installs, by the values (not the Namespace: see values.yaml). */}}
{{- define "torchrun-controller.files" -}}
{{- $files := list -}}
{{- $files = concat $files (list
  "config/rbac/service_account.yaml" "config/rbac/role.yaml" "config/rbac/role_binding.yaml"
  "config/rbac/leader_election_role.yaml" "config/rbac/leader_election_role_binding.yaml"
  "config/manager/service.yaml" "config/manager/deployment.yaml") -}}
{{- if .Values.networkPolicy.enabled }}{{ $files = append $files "config/manager/networkpolicy.yaml" }}{{ end -}}
{{- if .Values.monitoring.serviceMonitor.enabled }}{{ $files = append $files "config/prometheus/servicemonitor.yaml" }}{{ end -}}
{{- if .Values.monitoring.podMonitor.enabled }}{{ $files = append $files "config/prometheus/podmonitor.yaml" }}{{ end -}}
{{- if .Values.monitoring.prometheusRule.enabled }}{{ $files = append $files "config/prometheus/rules.yaml" }}{{ end -}}
{{- toJson $files -}}
{{- end }}

{{/*
The controller's arguments: config/'s, each flag named in .Values.flags replaced by its value
(true: the bare flag, false: removed), then the flags config/ does not set, in name order.
Takes (dict "args" LIST "flags" DICT); answers a JSON list.
*/}}
{{- define "torchrun-controller.args" -}}
{{- $flags := .flags -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range $arg := .args -}}
  {{- $name := trimPrefix "--" (first (splitList "=" $arg)) -}}
  {{- if hasKey $flags $name -}}
    {{- $_ := set $seen $name true -}}
    {{- $out = concat $out (include "torchrun-controller.flag" (list $name (index $flags $name)) | fromJsonArray) -}}
  {{- else -}}
    {{- $out = append $out $arg -}}
  {{- end -}}
{{- end -}}
{{- range $name := keys $flags | sortAlpha -}}
  {{- if not (hasKey $seen $name) -}}
    {{- $out = concat $out (include "torchrun-controller.flag" (list $name (index $flags $name)) | fromJsonArray) -}}
  {{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* One flag of .Values.flags as arguments: (list NAME VALUE) → a JSON list of zero or one. */}}
{{- define "torchrun-controller.flag" -}}
{{- $name := index . 0 -}}{{- $value := index . 1 -}}
{{- if kindIs "bool" $value -}}
{{- if $value }}{{ toJson (list (printf "--%s" $name)) }}{{ else }}[]{{ end -}}
{{- else if kindIs "float64" $value -}}
{{- toJson (list (printf "--%s=%s" $name (toString $value))) -}}
{{- else if or (kindIs "map" $value) (kindIs "slice" $value) (kindIs "invalid" $value) -}}
{{- fail (printf "flags.%s: a flag's value is a string, a number or true/false" $name) -}}
{{- else -}}
{{- toJson (list (printf "--%s=%v" $name $value)) -}}
{{- end -}}
{{- end }}
