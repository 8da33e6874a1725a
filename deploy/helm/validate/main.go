// Command validate reads Kubernetes manifests (a `helm template` output) on standard input and
// decodes each document into its Go API type with unknown and duplicate fields refused, the way
// the API server's strict field validation does. It exits 1 naming every document that does not
// decode, or whose kind it does not know.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// The types of every kind the chart renders, by apiVersion and kind.
func object(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}, true
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, true
	case "keda.sh/v1alpha1/ScaledObject":
		return &kedav1alpha1.ScaledObject{}, true
	case "keda.sh/v1alpha1/TriggerAuthentication":
		return &kedav1alpha1.TriggerAuthentication{}, true
	}
	return nil, false
}

// documents splits a YAML stream at its `---` lines.
func documents(in io.Reader) ([][]byte, error) {
	var docs [][]byte
	var current bytes.Buffer
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if strings.TrimRight(line, " ") == "---" {
			docs = append(docs, append([]byte(nil), current.Bytes()...))
			current.Reset()
			continue
		}
		current.WriteString(line)
		current.WriteByte('\n')
	}
	docs = append(docs, current.Bytes())
	return docs, scanner.Err()
}

func main() {
	docs, err := documents(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the manifests:", err)
		os.Exit(2)
	}
	failed := 0
	checked := 0
	for _, doc := range docs {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			fmt.Printf("not YAML: %v\n%s\n", err, doc)
			failed++
			continue
		}
		if head.Kind == "" {
			continue // a document of comments only
		}
		name := fmt.Sprintf("%s %s/%s", head.APIVersion, head.Kind, head.Metadata.Name)
		obj, known := object(head.APIVersion, head.Kind)
		if !known {
			fmt.Printf("%s: a kind this check does not know\n", name)
			failed++
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fmt.Printf("%s: %v\n", name, err)
			failed++
			continue
		}
		checked++
		fmt.Printf("ok %s\n", name)
	}
	fmt.Printf("%d valid, %d invalid\n", checked, failed)
	if failed > 0 || checked == 0 {
		os.Exit(1)
	}
}
