// Package deploy holds the production shape of orderpipe: deploy/Dockerfile
// (the one image), the OpenTelemetry collector config, the compose secrets
// and the Kubernetes manifests under k8s/. It has no code; its tests load
// ../docker-compose.yml and every manifest and check them against the code
// (subcommands and flags of main.go, the envVars table of config.go, probe
// paths and ports), so a rename in the code cannot silently break a deploy.
package deploy
