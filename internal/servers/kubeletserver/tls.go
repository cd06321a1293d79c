package kubeletserver

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// The self-signed certificate's file names in Config.CertDir, the kubelet's.
const (
	selfSignedCert = "kubelet.crt"
	selfSignedKey  = "kubelet.key"
)

// tlsVersions are the accepted tlsMinVersion values.
var tlsVersions = map[string]uint16{
	"":             tls.VersionTLS12,
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// tlsConfig builds the server's TLS configuration at now: the serving certificate,
// the minimum version and cipher suites. Client certificates are requested,
// not required: the authenticator verifies them against the client CA, so a
// request without one can still authenticate with a token.
func tlsConfig(cfg Config, log *slog.Logger, now time.Time) (*tls.Config, error) {
	min, ok := tlsVersions[cfg.TLSMinVersion]
	if !ok {
		return nil, fmt.Errorf("kubeletserver: tlsMinVersion %q: want VersionTLS12 or VersionTLS13", cfg.TLSMinVersion)
	}
	suites, err := cipherSuites(cfg.TLSCipherSuites)
	if err != nil {
		return nil, err
	}
	cert, err := servingCert(cfg, log, now)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   min,
		CipherSuites: suites,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		// HTTP/1.1 only: exec, attach and port-forward upgrade the connection.
		NextProtos: []string{"http/1.1"},
	}, nil
}

// cipherSuites maps IANA cipher suite names to their IDs.
func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	known := map[string]uint16{}
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		known[s.Name] = s.ID
	}
	var ids []uint16
	for _, n := range names {
		id, ok := known[n]
		if !ok {
			return nil, fmt.Errorf("kubeletserver: tlsCipherSuites: unknown cipher suite %q", n)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// loadKeyPair is tls.LoadX509KeyPair with the files read as
// decode.ReadRegularFile reads them: regular files of at most 10 MiB.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := decode.ReadRegularFile(certFile, 0)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := decode.ReadRegularFile(keyFile, 0)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// servingCert loads Config.TLSCertFile and TLSPrivateKeyFile, or else the
// self-signed pair in CertDir, made and written there when it is missing,
// unreadable or expired at now.
func servingCert(cfg Config, log *slog.Logger, now time.Time) (tls.Certificate, error) {
	if cfg.TLSCertFile != "" || cfg.TLSPrivateKeyFile != "" {
		if cfg.TLSCertFile == "" || cfg.TLSPrivateKeyFile == "" {
			return tls.Certificate{}, fmt.Errorf("kubeletserver: tlsCertFile %q and tlsPrivateKeyFile %q: set both or neither", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
		}
		c, err := loadKeyPair(cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("kubeletserver: tlsCertFile %q, tlsPrivateKeyFile %q: %w", cfg.TLSCertFile, cfg.TLSPrivateKeyFile, err)
		}
		return c, nil
	}
	if !filepath.IsAbs(cfg.CertDir) {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: Config.CertDir %q: want an absolute path (no tlsCertFile given)", cfg.CertDir)
	}
	certPath, keyPath := filepath.Join(cfg.CertDir, selfSignedCert), filepath.Join(cfg.CertDir, selfSignedKey)
	c, err := loadKeyPair(certPath, keyPath)
	if err == nil && c.Leaf != nil && now.Before(c.Leaf.NotAfter) {
		return c, nil
	}
	switch {
	case err == nil:
		log.Warn("Self-signed serving certificate expired; making a new one", "path", certPath)
	case !os.IsNotExist(err):
		log.Warn("Self-signed serving certificate unreadable; making a new one", "path", certPath, "err", err)
	}
	host := cfg.Hostname
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return tls.Certificate{}, fmt.Errorf("kubeletserver: hostname for the serving certificate: %w", err)
		}
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, cfg.NodeIPs, nil)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: self-signed certificate: %w", err)
	}
	if err := os.MkdirAll(cfg.CertDir, 0o755); err != nil {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: %w", err)
	}
	if err := certutil.WriteCert(certPath, certPEM); err != nil {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: write %s: %w", certPath, err)
	}
	if err := keyutil.WriteKey(keyPath, keyPEM); err != nil {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: write %s: %w", keyPath, err)
	}
	log.Info("Made a self-signed serving certificate", "path", certPath, "host", host, "ips", cfg.NodeIPs)
	c, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubeletserver: self-signed certificate: %w", err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("kubeletserver: self-signed certificate: %w", err)
		}
	}
	return c, nil
}
