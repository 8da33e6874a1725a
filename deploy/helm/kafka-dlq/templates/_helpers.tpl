{{/* Names and labels. */}}
{{- define "kafka-dlq.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafka-dlq.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels of every object; `component` is sidecar, monitor or console. */}}
{{- define "kafka-dlq.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/name: {{ include "kafka-dlq.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kafka-dlq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kafka-dlq.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kafka-dlq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kafka-dlq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kafka-dlq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Where secrets are mounted: each one a file under this directory. */}}
{{- define "kafka-dlq.secretsDir" -}}/etc/kafka-dlq/secrets{{- end -}}

{{/*
The config file, TOML: the connection and `config` at the top level (every command reads
them), each component's settings in its section. Secrets are never in it: it names the files
they are mounted as.
*/}}
{{- define "kafka-dlq.configFile" -}}
{{- $dir := include "kafka-dlq.secretsDir" . -}}
{{- $k := .Values.kafka -}}
{{- $top := deepCopy .Values.config -}}
{{- $_ := set $top "brokers" (required "kafka.brokers is required: the cluster's bootstrap servers, host:port,…" $k.brokers) -}}
{{- with $k.securityProtocol }}{{ $_ := set $top "security_protocol" . }}{{ end -}}
{{- with $k.saslMechanism }}{{ $_ := set $top "sasl_mechanism" . }}{{ end -}}
{{- with $k.saslUsername }}{{ $_ := set $top "sasl_username" . }}{{ end -}}
{{- if $k.saslPassword.secretName }}{{ $_ := set $top "sasl_password_file" (printf "%s/sasl-password" $dir) }}{{ end -}}
{{- with $k.oauth.tokenEndpoint }}{{ $_ := set $top "oauth_token_endpoint" . }}{{ end -}}
{{- with $k.oauth.clientId }}{{ $_ := set $top "oauth_client_id" . }}{{ end -}}
{{- with $k.oauth.scope }}{{ $_ := set $top "oauth_scope" . }}{{ end -}}
{{- if $k.oauth.clientSecret.secretName }}{{ $_ := set $top "oauth_client_secret_file" (printf "%s/oauth-client-secret" $dir) }}{{ end -}}
{{- with $k.awsRegion }}{{ $_ := set $top "aws_region" . }}{{ end -}}
{{- if $k.tls.secretName -}}
{{- $_ := set $top "ssl_ca_location" (printf "%s/tls/ca.crt" $dir) -}}
{{- if $k.tls.certificate }}{{ $_ := set $top "ssl_certificate_location" (printf "%s/tls/tls.crt" $dir) }}{{ end -}}
{{- if $k.tls.key }}{{ $_ := set $top "ssl_key_location" (printf "%s/tls/tls.key" $dir) }}{{ end -}}
{{- end -}}
{{- if $k.tls.keyPassword.secretName }}{{ $_ := set $top "ssl_key_password_file" (printf "%s/ssl-key-password" $dir) }}{{ end -}}
{{- if .Values.auditKey.secretName }}{{ $_ := set $top "audit_key_file" (printf "%s/audit-key" $dir) }}{{ end -}}
{{- $slack := .Values.monitor.slack -}}
{{- with $slack.channel }}{{ $_ := set $top "slack_channel" . }}{{ end -}}
{{- if $slack.webhookUrl.secretName }}{{ $_ := set $top "slack_webhook_url_file" (printf "%s/slack-webhook-url" $dir) }}{{ end -}}
{{- if $slack.token.secretName }}{{ $_ := set $top "slack_token_file" (printf "%s/slack-token" $dir) }}{{ end -}}
{{- if .Values.sidecar.enabled -}}
{{- $run := deepCopy .Values.sidecar.settings -}}
{{- $_ := set $run "group_id" (required "sidecar.groupId is required" .Values.sidecar.groupId) -}}
{{- if not .Values.sidecar.topics }}{{ fail "sidecar.topics is required: the topics the group reads" }}{{ end -}}
{{- $_ := set $run "topics" .Values.sidecar.topics -}}
{{- $_ := set $run "target_url" (include "kafka-dlq.targetUrl" .) -}}
{{- $_ := set $run "metrics_addr" (printf "0.0.0.0:%d" (int .Values.sidecar.metricsPort)) -}}
{{- if .Values.sidecar.monitor }}{{ $_ := set $run "monitor" true }}{{ end -}}
{{- $_ := set $top "run" $run -}}
{{- end -}}
{{- if .Values.monitor.enabled -}}
{{- $monitor := deepCopy .Values.monitor.settings -}}
{{- if not .Values.monitor.dlqTopics }}{{ fail "monitor.dlqTopics is required: the DLTs the monitor watches" }}{{ end -}}
{{- $_ := set $monitor "dlq_topics" .Values.monitor.dlqTopics -}}
{{- $_ := set $top "monitor" $monitor -}}
{{- end -}}
{{- if .Values.console.enabled -}}
{{- $console := deepCopy .Values.console.settings -}}
{{- with .Values.console.dlqTopics }}{{ $_ := set $console "dlq_topic" . }}{{ end -}}
{{- $_ := set $console "listen" (printf "0.0.0.0:%d" (int .Values.console.port)) -}}
{{- with .Values.console.pathPrefix }}{{ $_ := set $console "path_prefix" . }}{{ end -}}
{{- if not .Values.console.operatorTokens.secretName }}{{ fail "console.operatorTokens.secretName is required: a Secret of NAME:TOKEN lines (a token nobody knows, never a default)" }}{{ end -}}
{{- $_ := set $console "operator_token_file" (printf "%s/operator-tokens" $dir) -}}
{{- if .Values.console.viewerTokens.secretName }}{{ $_ := set $console "viewer_token_file" (printf "%s/viewer-tokens" $dir) }}{{ end -}}
{{- if .Values.console.sessionKey.secretName }}{{ $_ := set $console "session_key_file" (printf "%s/session-key" $dir) }}{{ end -}}
{{- $_ := set $top "console" $console -}}
{{- end -}}
{{- with $k.librdkafka }}{{ $_ := set $top "librdkafka" . }}{{ end -}}
{{- $sections := list "run" "monitor" "console" "librdkafka" -}}
{{- include "kafka-dlq.tomlTable" (omit $top "run" "monitor" "console" "librdkafka") -}}
{{- range $sections }}
{{- if hasKey $top . }}
{{ printf "\n[%s]" . }}
{{ include "kafka-dlq.tomlTable" (get $top .) -}}
{{- end }}
{{- end }}
{{- end -}}

{{/*
One TOML table's `key = value` lines, sorted. Helm reads every number of the values as a
float: a whole one is written as an integer, as kafka-dlq's settings are. A key that is not
a bare word (a librdkafka property) is quoted.
*/}}
{{- define "kafka-dlq.tomlTable" -}}
{{- range $key, $value := . }}
{{- $name := ternary $key (quote $key) (regexMatch "^[A-Za-z0-9_-]+$" $key) }}
{{ $name }} = {{ include "kafka-dlq.tomlValue" $value }}
{{- end }}
{{- end -}}

{{- define "kafka-dlq.tomlValue" -}}
{{- if kindIs "slice" . -}}
[{{ range $i, $item := . }}{{ if $i }}, {{ end }}{{ include "kafka-dlq.tomlValue" $item }}{{ end }}]
{{- else if kindIs "bool" . -}}
{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- if eq (float64 .) (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end -}}
{{- else if kindIs "map" . -}}
{{- fail "a config setting is a table: give kafka-dlq's settings as scalars or lists (docs/operating.md)" -}}
{{- else -}}
{{ toJson (toString .) }}
{{- end -}}
{{- end -}}

{{/* Where the sidecar POSTs: the app container on loopback, or the given URL. */}}
{{- define "kafka-dlq.targetUrl" -}}
{{- if .Values.sidecar.app -}}
{{- printf "http://127.0.0.1:%d%s" (int (required "sidecar.app.port is required: where the service listens" .Values.sidecar.app.port)) (default "/" .Values.sidecar.app.path) -}}
{{- else -}}
{{- required "sidecar.targetUrl is required (or sidecar.app, to run the service in the same pod)" .Values.sidecar.targetUrl -}}
{{- end -}}
{{- end -}}

{{/*
The secrets a component reads, as one projected volume of files; `component` is sidecar,
monitor or console. Each names only what that component needs.
*/}}
{{- define "kafka-dlq.secretSources" -}}
{{- $v := .root.Values -}}
{{- $k := $v.kafka -}}
{{- if $k.saslPassword.secretName }}
- secret:
    name: {{ $k.saslPassword.secretName }}
    items: [{key: {{ $k.saslPassword.key | quote }}, path: sasl-password}]
{{- end }}
{{- if $k.oauth.clientSecret.secretName }}
- secret:
    name: {{ $k.oauth.clientSecret.secretName }}
    items: [{key: {{ $k.oauth.clientSecret.key | quote }}, path: oauth-client-secret}]
{{- end }}
{{- if $k.tls.secretName }}
- secret:
    name: {{ $k.tls.secretName }}
    items:
      - {key: {{ $k.tls.ca | quote }}, path: tls/ca.crt}
      {{- with $k.tls.certificate }}
      - {key: {{ . | quote }}, path: tls/tls.crt}
      {{- end }}
      {{- with $k.tls.key }}
      - {key: {{ . | quote }}, path: tls/tls.key}
      {{- end }}
{{- end }}
{{- if $k.tls.keyPassword.secretName }}
- secret:
    name: {{ $k.tls.keyPassword.secretName }}
    items: [{key: {{ $k.tls.keyPassword.key | quote }}, path: ssl-key-password}]
{{- end }}
{{- if $v.auditKey.secretName }}
- secret:
    name: {{ $v.auditKey.secretName }}
    items: [{key: {{ $v.auditKey.key | quote }}, path: audit-key}]
{{- end }}
{{- if or (eq .component "monitor") (and (eq .component "sidecar") $v.sidecar.monitor) }}
{{- if $v.monitor.slack.webhookUrl.secretName }}
- secret:
    name: {{ $v.monitor.slack.webhookUrl.secretName }}
    items: [{key: {{ $v.monitor.slack.webhookUrl.key | quote }}, path: slack-webhook-url}]
{{- end }}
{{- if $v.monitor.slack.token.secretName }}
- secret:
    name: {{ $v.monitor.slack.token.secretName }}
    items: [{key: {{ $v.monitor.slack.token.key | quote }}, path: slack-token}]
{{- end }}
{{- end }}
{{- if eq .component "console" }}
- secret:
    name: {{ $v.console.operatorTokens.secretName }}
    items: [{key: {{ $v.console.operatorTokens.key | quote }}, path: operator-tokens}]
{{- if $v.console.viewerTokens.secretName }}
- secret:
    name: {{ $v.console.viewerTokens.secretName }}
    items: [{key: {{ $v.console.viewerTokens.key | quote }}, path: viewer-tokens}]
{{- end }}
{{- if $v.console.sessionKey.secretName }}
- secret:
    name: {{ $v.console.sessionKey.secretName }}
    items: [{key: {{ $v.console.sessionKey.key | quote }}, path: session-key}]
{{- end }}
{{- end }}
{{- end -}}

{{/* The volumes of a kafka-dlq container: its config, its secrets, a writable /tmp. */}}
{{- define "kafka-dlq.volumes" -}}
- name: config
  configMap:
    name: {{ include "kafka-dlq.fullname" .root }}
- name: tmp
  emptyDir: {}
{{- $sources := include "kafka-dlq.secretSources" . }}
{{- if trim $sources }}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      {{- $sources | nindent 6 }}
{{- end }}
{{- end -}}

{{- define "kafka-dlq.volumeMounts" -}}
- {name: config, mountPath: /etc/kafka-dlq/kafka-dlq.toml, subPath: kafka-dlq.toml, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if trim (include "kafka-dlq.secretSources" .) }}
- {name: secrets, mountPath: {{ include "kafka-dlq.secretsDir" .root }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* The environment of a kafka-dlq container. */}}
{{- define "kafka-dlq.env" -}}
- {name: KAFKA_DLQ_CONFIG, value: /etc/kafka-dlq/kafka-dlq.toml}
- {name: LOG_FORMAT, value: json}
{{- end -}}

{{/* Pod-level settings every component shares. */}}
{{- define "kafka-dlq.podSpec" -}}
serviceAccountName: {{ include "kafka-dlq.serviceAccountName" .root }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
