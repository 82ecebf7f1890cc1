// Package deploy holds the production shape of orderpipe: deploy/Dockerfile
// (the one image), the OpenTelemetry collector config, the compose secrets,
// the Prometheus rules and the Kubernetes kustomize base, overlays and
// components under k8s/. It has no code; its tests load ../docker-compose.yml
// and render every overlay, validate the objects against the Kubernetes
// schemas, check an upgrade touches no immutable field, and check both shapes
// against the code (subcommands and flags of main.go, the settings declarations of
// config.go, probe paths and ports) and against one declaration of the
// components (components_test.go), so a rename in the code cannot silently
// break a deploy and the two shapes cannot drift apart.
package deploy

//go:generate go test -count=1 -run TestPrometheusRuleMatchesRulesFile . -update-rules
