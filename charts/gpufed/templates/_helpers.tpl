{{/* Names, labels and the few values several templates share. */}}

{{- define "gpufed.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpufed.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpufed.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufed.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpufed.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpufed.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpufed.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpufed.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpufed.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "gpufed.redisImage" -}}
{{- $i := .Values.redis.internal.image -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository $i.tag -}}
{{- end -}}
{{- end -}}

{{- define "gpufed.internalRedis" -}}
{{- if and (not .Values.redis.url) .Values.redis.internal.enabled -}}true{{- end -}}
{{- end -}}

{{- define "gpufed.redisHost" -}}
{{- printf "%s-redis" (include "gpufed.fullname" .) -}}
{{- end -}}

{{/* The Redis URL without the password; the password joins it in the pod (REDIS_URL). */}}
{{- define "gpufed.redisUrl" -}}
{{- if and .Values.redis.sentinelPasswordKey (not (hasPrefix "redis+sentinel://" .Values.redis.url)) -}}
{{- fail "redis.sentinelPasswordKey: only with a redis+sentinel:// redis.url and redis.existingSecret" -}}
{{- end -}}
{{- if .Values.redis.url -}}
{{- .Values.redis.url -}}
{{- else if .Values.redis.internal.enabled -}}
{{- printf "redis://%s:6379/0" (include "gpufed.redisHost" .) -}}
{{- else -}}
{{- fail "redis: set redis.url (an external Redis) or redis.internal.enabled=true" -}}
{{- end -}}
{{- end -}}

{{- define "gpufed.kubeconfigSecret" -}}
{{- default (printf "%s-kubeconfigs" (include "gpufed.fullname" .)) .Values.kubeconfigs.existingSecret -}}
{{- end -}}

{{/* The Secret holding the Redis password: the operator's, else (the chart's own Redis) one the chart
makes. Empty when Redis runs without a password (an external Redis without existingSecret, or
redis.internal.auth=false). */}}
{{- define "gpufed.redisSecret" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else if and (include "gpufed.internalRedis" .) .Values.redis.internal.auth -}}
{{- printf "%s-redis-password" (include "gpufed.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The hub's kubeconfig as the broker reads it: the chart's in-cluster one, or hub.kubeconfig of the
     kubeconfigs Secret. */}}
{{- define "gpufed.hubKubeconfig" -}}
{{- if .Values.hub.inCluster -}}/etc/gpufed/config/hub.kubeconfig{{- else -}}/etc/gpufed/kubeconfigs/hub.kubeconfig{{- end -}}
{{- end -}}

{{- define "gpufed.profilesHubKubeconfig" -}}
{{- if .Values.clusterProfiles.inCluster -}}/etc/gpufed/config/hub.kubeconfig{{- else -}}/etc/gpufed/kubeconfigs/hub.kubeconfig{{- end -}}
{{- end -}}

{{/* Whether the broker calls the API server of the cluster it runs in (an in-cluster hub). */}}
{{- define "gpufed.inClusterHub" -}}
{{- if or (and .Values.hub.enabled .Values.hub.inCluster) (and .Values.clusterProfiles.enabled .Values.clusterProfiles.inCluster) -}}true{{- end -}}
{{- end -}}
