package apiservertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodekeeper/nodekeeper/internal/testenv/integration"
	"github.com/nodekeeper/nodekeeper/internal/testenv/kubebuild"
	"github.com/nodekeeper/nodekeeper/internal/testenv/toolbuild"
)

// KubeAPIServer returns the path of kube-apiserver, built from hack/kube
// (k8s.io/kubernetes v1.36.3) once per machine (see internal/testenv/toolbuild:
// cached, file-locked). In -short mode it skips t, unless CI=true; a failed
// build fails t.
func KubeAPIServer(t testing.TB) string {
	t.Helper()
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipping the kube-apiserver build in -short mode")
	}
	spec, err := kubebuild.APIServer()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	dir, err := toolbuild.Build(spec)
	if err != nil {
		t.Fatalf("build hack/kube: %v", err)
	}
	if d := time.Since(began); d > 10*time.Second { // built, or waited for another build
		t.Logf("kube-apiserver built from hack/kube in %v", d.Round(time.Second))
	}
	return filepath.Join(dir, "kube-apiserver")
}

// Etcd returns the path of the etcd binary (PATH, then /usr/bin/etcd), or ""
// if there is none.
func Etcd() string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if st, err := os.Stat("/usr/bin/etcd"); err == nil && st.Mode()&0o111 != 0 {
		return "/usr/bin/etcd"
	}
	return ""
}

// DefaultServiceClusterIPRange is the service CIDR when
// Options.ServiceClusterIPRange is empty.
const DefaultServiceClusterIPRange = "10.96.0.0/24"

// ServiceAccountIssuer is the service-account token issuer and audience.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// KubeletClientUser is the user name of the client certificate the API
// server presents to kubelets.
const KubeletClientUser = "kube-apiserver-kubelet-client"

// Options configure Start. The zero value is a usable default.
type Options struct {
	// ServiceClusterIPRange is --service-cluster-ip-range
	// (DefaultServiceClusterIPRange if empty).
	ServiceClusterIPRange string
	// AdvertiseAddress is --advertise-address; if nil, the IPv4 address of
	// the host's default-route interface (k8s.io/apimachinery's
	// ChooseHostInterface). It must not be a loopback address.
	AdvertiseAddress net.IP
	// ExtraArgs are further kube-apiserver flags, after ours (for a flag
	// given twice, the last value wins).
	ExtraArgs []string
}

// startTimeout bounds each wait for etcd or kube-apiserver to become ready.
const startTimeout = 2 * time.Minute

// Server is a running etcd and kube-apiserver.
type Server struct {
	dir       string
	binary    string
	args      []string
	port      int
	url       string
	advertise net.IP

	ca                       *authority
	caFile                   string
	adminToken               string
	adminConfig              *rest.Config
	admin                    kubernetes.Interface
	adminKubeconfig          string
	kubeletCert, kubeletKey  string
	apiLog, etcdLog, etcdURL string

	etcd      *process
	apiserver *process // nil while stopped
}

// Start starts etcd and kube-apiserver for t and returns once the API server
// is ready and the namespace "default" is prepared (see Namespace). Both are
// stopped when t ends. See the package comment for the setup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	etcdBin := Etcd()
	if etcdBin == "" {
		integration.Require(t, "etcd not found in PATH or /usr/bin (Debian package etcd-server)")
	}
	advertise := opts.AdvertiseAddress
	if advertise == nil {
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			integration.Require(t, fmt.Sprintf("no non-loopback IPv4 address to advertise: %v", err))
		}
		advertise = ip
	}
	if advertise.IsLoopback() {
		t.Fatalf("apiservertest: advertise address %s is a loopback address", advertise)
	}
	binary := KubeAPIServer(t)
	began := time.Now()

	s := &Server{dir: t.TempDir(), binary: binary, advertise: advertise}
	s.apiLog = filepath.Join(s.dir, "kube-apiserver.log")
	s.etcdLog = filepath.Join(s.dir, "etcd.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("etcd log (%s):\n%s", s.etcdLog, tail(s.etcdLog, 20))
			t.Logf("kube-apiserver log (%s):\n%s", s.apiLog, tail(s.apiLog, 80))
		}
		if s.apiserver != nil {
			s.apiserver.stop(10 * time.Second)
		}
		if s.etcd != nil {
			s.etcd.stop(10 * time.Second)
		}
	})
	if err := s.startEtcd(etcdBin); err != nil {
		t.Fatal(err)
	}
	cidr := opts.ServiceClusterIPRange
	if cidr == "" {
		cidr = DefaultServiceClusterIPRange
	}
	if err := s.writeCredentials(cidr); err != nil {
		t.Fatal(err)
	}
	s.args = []string{
		"--etcd-servers=" + s.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=" + advertise.String(),
		"--tls-cert-file=" + s.path("serving.crt"),
		"--tls-private-key-file=" + s.path("serving.key"),
		"--client-ca-file=" + s.caFile,
		"--token-auth-file=" + s.path("tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-cluster-ip-range=" + cidr,
		"--service-account-key-file=" + s.path("sa.pub"),
		"--service-account-signing-key-file=" + s.path("sa.key"),
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--api-audiences=" + ServiceAccountIssuer,
		"--kubelet-client-certificate=" + s.kubeletCert,
		"--kubelet-client-key=" + s.kubeletKey,
		// As kubeadm sets it: a node's InternalIP before its host name,
		// which need not resolve here.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--profiling=false",
		// Debian's etcd 3.4 does not give the watch cache what it needs
		// (its current resource version stays 1: every watch from a list's
		// resource version ends with "Too large resource version"), so
		// watches are served from etcd directly.
		"--watch-cache=false",
	}
	s.args = append(s.args, opts.ExtraArgs...)
	// The port is picked once and kept across Restart; another process may
	// take it between freePort and the bind, so the first start retries.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s.port = port
		s.url = "https://127.0.0.1:" + strconv.Itoa(port)
		err = s.startAPIServer()
		if err == nil {
			break
		}
		if attempt == 3 || !errors.Is(err, errAddressInUse) {
			t.Fatal(err)
		}
	}
	if err := s.makeClients(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := s.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "apiservertest:kubelet-api-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KubeletClientUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind %s to system:kubelet-api-admin: %v", KubeletClientUser, err)
	}
	// The API server makes these itself, soon after it is ready; make sure
	// they exist before a node writes its Lease.
	for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease} {
		_, err := s.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	s.Namespace(t, metav1.NamespaceDefault)
	t.Logf("kube-apiserver %s ready in %v (etcd %s, advertising %s, dir %s)", s.url, time.Since(began).Round(time.Millisecond), s.etcdURL, advertise, s.dir)
	return s
}

// path returns name in the server's directory.
func (s *Server) path(name string) string { return filepath.Join(s.dir, name) }

// startEtcd starts etcd on free ports and waits until it is healthy,
// retrying with other ports when one was taken.
func (s *Server) startEtcd(bin string) error {
	for attempt := 1; ; attempt++ {
		client, err := freePort()
		if err != nil {
			return err
		}
		peer, err := freePort()
		if err != nil {
			return err
		}
		s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
		p, err := startProcess("etcd", bin, []string{
			"--name=apiservertest",
			"--data-dir=" + s.path("etcd"),
			"--listen-client-urls=" + s.etcdURL,
			"--advertise-client-urls=" + s.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=apiservertest=" + peerURL,
			"--logger=zap",
			"--log-outputs=stderr",
		}, s.etcdLog)
		if err != nil {
			return err
		}
		err = waitReady(p, s.etcdURL+"/health", http.DefaultClient, "", s.etcdLog)
		if err == nil {
			s.etcd = p
			return nil
		}
		p.stop(5 * time.Second)
		if attempt == 3 || !errors.Is(err, errAddressInUse) {
			return err
		}
		// A port was taken; the data directory may hold a half-made member.
		if err := os.RemoveAll(s.path("etcd")); err != nil {
			return err
		}
	}
}

// errAddressInUse marks a process that exited because its port was taken.
var errAddressInUse = errors.New("address already in use")

// startAPIServer starts kube-apiserver with s.args on s.port and waits for
// /readyz. The log is appended to, so a restart's output follows the first.
func (s *Server) startAPIServer() error {
	args := append([]string{"--secure-port=" + strconv.Itoa(s.port)}, s.args...)
	appendLine(s.apiLog, fmt.Sprintf("=== apiservertest: %s starting kube-apiserver on port %d", time.Now().Format(time.RFC3339Nano), s.port))
	p, err := startProcess("kube-apiserver", s.binary, args, s.apiLog)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	if err := waitReady(p, s.url+"/readyz", client, s.adminToken, s.apiLog); err != nil {
		p.stop(5 * time.Second)
		return err
	}
	s.apiserver = p
	return nil
}

// appendLine appends line to the file at path; a line that cannot be written
// is dropped (it only marks the log).
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line + "\n")
}

// waitReady polls url until it answers 200, p exits, or startTimeout passes.
func waitReady(p *process, url string, client *http.Client, token, logPath string) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			if addressInUse(logPath) {
				return fmt.Errorf("%s exited (%v): %w", p.name, p.err, errAddressInUse)
			}
			return fmt.Errorf("%s exited before it was ready (%v); log %s:\n%s", p.name, p.err, logPath, tail(logPath, 40))
		case <-deadline.C:
			return fmt.Errorf("%s not ready after %v: GET %s: %s", p.name, startTimeout, url, last)
		case <-tick.C:
		}
	}
}

// writeCredentials makes the CA, the serving and kubelet-client
// certificates, the service-account key pair, the token file and the admin
// kubeconfig's data.
func (s *Server) writeCredentials(serviceCIDR string) error {
	_, svcNet, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return fmt.Errorf("service cluster IP range %q: %w", serviceCIDR, err)
	}
	firstIP := append(net.IP(nil), svcNet.IP...)
	firstIP[len(firstIP)-1]++
	if s.ca, err = newAuthority("apiservertest-ca"); err != nil {
		return err
	}
	s.caFile = s.path("ca.crt")
	servingCert, servingKey, err := s.ca.issue(leaf{
		cn: "kube-apiserver",
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		ips:    []net.IP{net.IPv4(127, 0, 0, 1), s.advertise, firstIP},
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return err
	}
	kubeletCert, kubeletKey, err := s.ca.issue(leaf{
		cn:     KubeletClientUser,
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return err
	}
	s.kubeletCert, s.kubeletKey = s.path("kubelet-client.crt"), s.path("kubelet-client.key")
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPriv, err := encodeKey(saKey)
	if err != nil {
		return err
	}
	saPub, err := encodePublicKey(saKey.Public())
	if err != nil {
		return err
	}
	s.adminToken = rand.Text()
	return writeFiles(map[string][]byte{
		s.caFile:              s.ca.certPEM,
		s.path("serving.crt"): servingCert,
		s.path("serving.key"): servingKey,
		s.kubeletCert:         kubeletCert,
		s.kubeletKey:          kubeletKey,
		s.path("sa.key"):      saPriv,
		s.path("sa.pub"):      saPub,
		s.path("tokens.csv"):  []byte(s.adminToken + ",admin,admin,system:masters\n"),
	})
}

// makeClients writes the admin kubeconfig and makes the admin clientset.
func (s *Server) makeClients() error {
	s.adminKubeconfig = s.path("admin.kubeconfig")
	if err := s.writeKubeconfig(s.adminKubeconfig, "admin", &clientcmdapi.AuthInfo{Token: s.adminToken}); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.adminKubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", s.adminKubeconfig, err)
	}
	s.adminConfig = cfg
	s.admin, err = kubernetes.NewForConfig(rest.CopyConfig(cfg))
	return err
}

// writeKubeconfig writes a kubeconfig for this server and the user.
func (s *Server) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["apiservertest"] = &clientcmdapi.Cluster{Server: s.url, CertificateAuthorityData: s.ca.certPEM}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "apiservertest", AuthInfo: user}
	cfg.CurrentContext = "default"
	return clientcmd.WriteToFile(*cfg, path)
}

// URL returns the API server's URL, https://127.0.0.1:PORT (the same after
// Restart).
func (s *Server) URL() string { return s.url }

// CAFile returns the path of the CA certificate (PEM) that signed the
// serving certificate and every client certificate.
func (s *Server) CAFile() string { return s.caFile }

// CAPEM returns the CA certificate in PEM form. The caller must not modify it.
func (s *Server) CAPEM() []byte { return s.ca.certPEM }

// ClientCAFile returns the CA file a kubelet server should trust for client
// certificates: it signed the API server's kubelet client certificate (it is
// the same file as CAFile).
func (s *Server) ClientCAFile() string { return s.caFile }

// KubeletClientCert returns the paths of the client certificate and key the
// API server presents to kubelets (user KubeletClientUser).
func (s *Server) KubeletClientCert() (certFile, keyFile string) { return s.kubeletCert, s.kubeletKey }

// AdvertiseAddress returns the API server's --advertise-address.
func (s *Server) AdvertiseAddress() net.IP { return s.advertise }

// Admin returns a clientset authenticated as an admin (group
// system:masters). It keeps working across Stop and Restart.
func (s *Server) Admin() kubernetes.Interface { return s.admin }

// AdminConfig returns a copy of the admin's client configuration.
func (s *Server) AdminConfig() *rest.Config { return rest.CopyConfig(s.adminConfig) }

// NodeKubeconfig issues a client certificate for the node nodeName (CN
// system:node:NAME, O system:nodes) and returns the path of a kubeconfig
// file, in a directory of t's, that embeds it. Each call issues a new one.
func (s *Server) NodeKubeconfig(t testing.TB, nodeName string) string {
	t.Helper()
	cert, key, err := s.ca.issue(leaf{
		cn: "system:node:" + nodeName, orgs: []string{"system:nodes"},
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node-"+nodeName+".kubeconfig")
	user := "system:node:" + nodeName
	if err := s.writeKubeconfig(path, user, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}); err != nil {
		t.Fatal(err)
	}
	return path
}

// Namespace creates the namespace name, if it does not exist, with what the
// kube-controller-manager would add to it: the ServiceAccount "default" and
// the ConfigMap "kube-root-ca.crt" whose "ca.crt" is the CA. Objects that
// exist are left alone, so it is idempotent.
func (s *Server) Namespace(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := s.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	_, err = s.admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/default: %v", name, err)
	}
	_, err = s.admin.CoreV1().ConfigMaps(name).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(s.ca.certPEM)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create config map %s/kube-root-ca.crt: %v", name, err)
	}
}

// Stop stops the kube-apiserver process (SIGTERM, SIGKILL after 10s) and
// returns once it has exited; etcd keeps running with the data. Stopping a
// stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.apiserver == nil {
		return
	}
	s.apiserver.stop(10 * time.Second)
	s.apiserver = nil
}

// Restart starts kube-apiserver again on the same port with the same
// arguments, certificates and keys (stopping it first if it runs) and
// returns once it is ready.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	began := time.Now()
	if err := s.startAPIServer(); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver %s ready again in %v", s.url, time.Since(began).Round(time.Millisecond))
}
