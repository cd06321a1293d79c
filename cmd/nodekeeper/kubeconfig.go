package main

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodekeeper/nodekeeper/internal/config"
)

// kubeconfigName names the cluster, user and context of the kubeconfig
// nodekeeper kubeconfig prints.
const kubeconfigName = "nodekeeper"

func newKubeconfigCmd() *cobra.Command {
	var at agentTarget
	cmd := &cobra.Command{
		Use:   "kubeconfig [--root-dir DIR | --socket PATH]",
		Short: "Print a kubeconfig with which kubectl reads the agent's read-only port (kubectl get --raw /pods)",
		Long: `Asks a running 'nodekeeper run', through its unix socket ROOT_DIR/nodekeeper.sock
(root only; default ` + defaultSocket + `), for its configuration and prints a
kubeconfig whose server is its read-only port, so that kubectl reads what that
port serves:

  nodekeeper kubeconfig > nodekeeper.kubeconfig
  kubectl --kubeconfig nodekeeper.kubeconfig get --raw /pods
  kubectl --kubeconfig nodekeeper.kubeconfig get --raw /stats/summary

kubectl reaches servers over TCP only, never a unix socket, and the read-only
port is the agent's only TCP port without credentials. It serves reads alone
(/pods, /stats/summary, /metrics, /metrics/cadvisor, /node, /healthz), not the
API server's paths: 'kubectl get pods' (which asks /api/v1/...) does not work,
'nodekeeper get pods' does. The read-only port is off unless readOnlyPort is
set in the configuration file, as the kubelet's; then the command exits 1
saying so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, base, sock, err := at.client(cmd)
			if err != nil {
				return err
			}
			cfg, err := loadConfigz(func(path string) ([]byte, string, error) {
				return readAgent(cmd.Context(), c, base, sock, path)
			})
			if err != nil {
				return err
			}
			kc, err := readOnlyKubeconfig(sock, cfg)
			if err != nil {
				return err
			}
			data, err := clientcmd.Write(*kc)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	at.socketFlags(cmd, "the configuration is read")
	return cmd
}

// readOnlyKubeconfig returns the kubeconfig of the read-only port that the
// agent at sock, configured as cfg, serves; an error saying how to turn the
// port on, and what that exposes, when it is off.
func readOnlyKubeconfig(sock string, cfg *config.Config) (*clientcmdapi.Config, error) {
	port := cfg.Agent.ReadOnlyPort
	if port == 0 {
		return nil, fmt.Errorf("the nodekeeper at %s has no read-only port (readOnlyPort: 0, the default, as the kubelet's), the only port kubectl could read: "+
			"set readOnlyPort (the kubelet's is 10255) in the file given to 'nodekeeper run --config' and restart it; "+
			"then anyone on the node can read every pod, environment values included, without credentials", sock)
	}
	server := "http://" + net.JoinHostPort(readOnlyHost(cfg.Agent.Address), strconv.Itoa(int(port)))
	kc := clientcmdapi.NewConfig()
	kc.Clusters[kubeconfigName] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{}
	kc.Contexts[kubeconfigName] = &clientcmdapi.Context{Cluster: kubeconfigName, AuthInfo: kubeconfigName}
	kc.CurrentContext = kubeconfigName
	return kc, nil
}

// readOnlyHost is the host a client on the node reaches the read-only port
// at when it listens on address: loopback for the unspecified addresses.
func readOnlyHost(address string) string {
	switch address {
	case "", "0.0.0.0":
		return "127.0.0.1"
	case "::":
		return "::1"
	}
	return address
}
