{{/* The image every component runs: repository:tag, or repository@digest. */}}
{{- define "pykatalyst.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Labels on every object; `component` is the app.kubernetes.io/name of the component. */}}
{{- define "pykatalyst.labels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/part-of: pykatalyst
{{- if .root.Values.commonLabels }}
{{ toYaml .root.Values.commonLabels }}
{{- end }}
{{- end -}}

{{/* The pod security context of the unprivileged components. */}}
{{- define "pykatalyst.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsUser }}
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/* The container security context of the unprivileged components. */}}
{{- define "pykatalyst.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}


{{/* One entry of a webhook configuration's `webhooks:`. */}}
{{- define "pykatalyst.webhook" -}}
- name: {{ .name }}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: {{ .values.failurePolicy }}
  timeoutSeconds: {{ .values.timeoutSeconds }}
  clientConfig:
    service:
      name: {{ .svc }}
      namespace: {{ .ns }}
      path: {{ .path }}
    {{- if .ca }}
    caBundle: {{ .ca }}
    {{- end }}
  namespaceSelector:
    {{- with .values.namespaceSelector }}
    matchLabels:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
        values:
          {{- toYaml .excluded | nindent 10 }}
  rules:
    - apiGroups: [{{ .group | default "" | quote }}]
      apiVersions: [{{ .version | default "v1" }}]
      operations: {{ toJson .operations }}
      resources: [{{ .resource }}]
      scope: "*"
{{- end -}}

{{/* The pod's network (value hostNetwork): the pod network, or the node's. */}}
{{- define "pykatalyst.podNetwork" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{/* Where --in-cluster finds the API server (value apiServer): the `kubernetes` Service
     Kubernetes announces, unless an address is given. */}}
{{- define "pykatalyst.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.apiServer.port | quote }}
{{- end }}
{{- end -}}

{{/* The name of a cluster-scoped object (ClusterRoles, their bindings, the webhook
     configurations) or of one outside the release's namespace (the controller's Role in
     kube-system): Katalyst's, with clusterScopedSuffix appended when set. */}}
{{- define "pykatalyst.clusterName" -}}
{{- $root := index . 0 -}}
{{ index . 1 }}{{ with $root.Values.clusterScopedSuffix }}-{{ . }}{{ end }}
{{- end -}}

{{/* agent.yaml: agent.config, with devices.dra turned on and pointed at the kubelet's
plugin directories when the chart runs the DRA plugin (dra.plugin.enabled). */}}
{{- define "pykatalyst.agentConfig" -}}
{{- $config := deepCopy .Values.agent.config }}
{{- if .Values.dra.plugin.enabled }}
{{- $dra := dict "enabled" true "plugin_dir" .Values.dra.plugin.dir "registry_dir" .Values.dra.plugin.registryDir }}
{{- $config = mergeOverwrite $config (dict "devices" (dict "dra" $dra)) }}
{{- end }}
{{- toYaml $config }}
{{- end -}}
