package kubeletserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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

// fileRecheck is how often the files the server reads again when they
// change (the serving certificate and key, the client CA bundle) are looked
// at: a stat of each, and a read only when one changed.
const fileRecheck = 5 * time.Second

// tlsConfig builds the server's TLS configuration at now: the serving certificate,
// the minimum version and cipher suites. Client certificates are requested,
// not required: the authenticator verifies them against the client CA, so a
// request without one can still authenticate with a token. With tlsCertFile
// and tlsPrivateKeyFile, files is non-nil: its Run reads them again when they
// change, and new connections get the new certificate.
func tlsConfig(cfg Config, log *slog.Logger, now time.Time) (_ *tls.Config, files *certFiles, _ error) {
	min, ok := tlsVersions[cfg.TLSMinVersion]
	if !ok {
		return nil, nil, fmt.Errorf("kubeletserver: tlsMinVersion %q: want VersionTLS12 or VersionTLS13", cfg.TLSMinVersion)
	}
	suites, err := cipherSuites(cfg.TLSCipherSuites)
	if err != nil {
		return nil, nil, err
	}
	c := &tls.Config{
		MinVersion:   min,
		CipherSuites: suites,
		ClientAuth:   tls.RequestClientCert,
		// HTTP/1.1 only: exec, attach and port-forward upgrade the connection.
		NextProtos: []string{"http/1.1"},
	}
	if cfg.TLSCertFile != "" || cfg.TLSPrivateKeyFile != "" {
		if cfg.TLSCertFile == "" || cfg.TLSPrivateKeyFile == "" {
			return nil, nil, fmt.Errorf("kubeletserver: tlsCertFile %q and tlsPrivateKeyFile %q: set both or neither", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
		}
		files = &certFiles{certFile: cfg.TLSCertFile, keyFile: cfg.TLSPrivateKeyFile, log: log}
		if _, err := files.reload(); err != nil {
			return nil, nil, fmt.Errorf("kubeletserver: tlsCertFile %q, tlsPrivateKeyFile %q: %w", cfg.TLSCertFile, cfg.TLSPrivateKeyFile, err)
		}
		c.GetCertificate = files.get
		return c, files, nil
	}
	cert, err := selfSigned(cfg, log, now)
	if err != nil {
		return nil, nil, err
	}
	c.Certificates = []tls.Certificate{cert}
	return c, nil, nil
}

// certFiles is the serving certificate of tlsCertFile and
// tlsPrivateKeyFile, read again when either file changes, as the kubelet's
// ReloadKubeletServerCertificateFile (on by default) has it.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger
	cur               atomic.Pointer[tls.Certificate]
	// stamps are the files' when cur was read; only reload's caller
	// (New, then Run's goroutine) uses them.
	stamps [2]fileStamp
}

func (f *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.cur.Load(), nil }

// reload reads the pair again when a file changed and reports whether it
// did. A pair that does not load leaves the certificate as it was.
func (f *certFiles) reload() (bool, error) {
	stamps := [2]fileStamp{stampOf(f.certFile), stampOf(f.keyFile)}
	if f.cur.Load() != nil && stamps == f.stamps {
		return false, nil
	}
	c, err := loadKeyPair(f.certFile, f.keyFile)
	if err != nil {
		return false, err
	}
	f.cur.Store(&c)
	f.stamps = stamps
	return true, nil
}

// Run looks at the files every fileRecheck until ctx ends.
func (f *certFiles) Run(ctx context.Context) {
	reloadEvery(ctx, f.log, "Serving certificate", f.reload, "certFile", f.certFile, "keyFile", f.keyFile)
}

// reloadEvery calls reload every fileRecheck until ctx ends, and logs what
// each call did: a file that does not load (what stays as it was), or a
// reload.
func reloadEvery(ctx context.Context, log *slog.Logger, what string, reload func() (bool, error), args ...any) {
	t := time.NewTicker(fileRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := reload()
		switch {
		case err != nil:
			log.Error(what+" unreadable; keeping the one loaded", append(args, "err", err)...)
		case changed:
			log.Info(what+" reloaded", args...)
		}
	}
}

// fileStamp tells a changed file from an unchanged one without reading it:
// a write changes its modification time or size, a replacement its inode.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
}

// stampOf is path's stamp; the zero stamp when it cannot be read.
func stampOf(path string) fileStamp {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileStamp{}
	}
	return fileStamp{ino: int64(st.Ino), size: st.Size, mtime: time.Unix(st.Mtim.Unix())}
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

// selfSigned is the self-signed pair in CertDir (no tlsCertFile given),
// made and written there when it is missing, unreadable or expired at now.
func selfSigned(cfg Config, log *slog.Logger, now time.Time) (tls.Certificate, error) {
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
