// Package apiservertest runs a real kube-apiserver (v1.36.3, built from the
// tools module hack/kube) over a private etcd for tests, set up like a
// kubeadm control plane without a kube-controller-manager, so code that joins
// a node to a cluster is tested against the real authorization and admission
// rules a kubelet meets.
//
// Start(t, Options{}) runs, for t and stopped at t.Cleanup:
//
//   - etcd (Debian's etcd-server, from PATH or /usr/bin/etcd) on two free
//     127.0.0.1 ports with a data directory under t.TempDir();
//   - kube-apiserver on https://127.0.0.1:PORT (--bind-address=127.0.0.1),
//     advertising the IP of the host's default-route interface (loopback is
//     no advertise address), with a generated ECDSA P-256 CA that signs its
//     serving certificate (SANs 127.0.0.1, localhost, the advertise IP, the
//     first service IP and kubernetes.default.svc[.cluster.local]) and every
//     client certificate it accepts (--client-ca-file); a static token file
//     holding an admin token (group system:masters);
//     --authorization-mode=Node,RBAC and
//     --enable-admission-plugins=NodeRestriction, so a node identity may do
//     only what a kubelet may; --watch-cache=false, since with Debian's etcd
//     3.4 the watch cache never catches up and watches fail; service-account signing keys, issuer and
//     audiences, so TokenRequest works; and a kubelet client certificate
//     (user kube-apiserver-kubelet-client, bound to the ClusterRole
//     system:kubelet-api-admin) that it presents to kubelets for logs, exec
//     and port-forward, trusting any kubelet serving certificate.
//
// Both processes die with the test process (Pdeathsig) and log to files in
// the temporary directory; when t failed, cleanup prints the tail of both
// logs. Start returns once /readyz answers 200 and the namespace "default"
// is prepared as Namespace prepares one. It skips t when etcd is missing or
// in -short mode, unless CI=true, where it fails t (internal/testenv/integration);
// a failed build of kube-apiserver always fails t.
//
// No kube-controller-manager runs: (*Server).Namespace(t, name) creates a
// namespace with what its controllers would add (a "default" ServiceAccount
// and the ConfigMap "kube-root-ca.crt" holding the CA under "ca.crt"); no
// ServiceAccount token Secrets, no node lifecycle (taints are never removed,
// a silent node is never marked NotReady), no garbage collection.
//
// What the test TestServer shows of the rules a node meets: it may create
// its own Node and Lease but not another node's, and update its Node's
// status; create a mirror pod (annotated kubernetes.io/config.mirror) bound
// to itself only with an owner reference to its Node; read and list (by
// spec.nodeName) the pods bound to it; and request a token for such a pod's
// service account, bound to the pod, only for an audience one of the pod's
// projected token volumes names (none named: the API server's own, as in
// the injected kube-api-access volume), never for another node's pod.
//
// Accessors: URL, CAFile, CAPEM, Admin (a client-go clientset with the admin
// token), AdminConfig, AdminKubeconfig (a kubeconfig file), NodeKubeconfig(t,
// name) (a kubeconfig with a client certificate for system:node:NAME in
// group system:nodes), ClientCAFile (the CA a kubelet server trusts for the
// API server's client certificate), KubeletClientCert, Log.
// Stop stops the kube-apiserver process only (etcd and its data stay), and
// Restart starts it again on the same port with the same certificates and
// keys, for "API server gone and back" tests.
//
// A Server's accessors are safe for concurrent use; Stop, Restart and
// Namespace are called from the test's goroutine.
package apiservertest
