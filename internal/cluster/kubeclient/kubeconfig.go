package kubeclient

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodekeeper/nodekeeper/internal/base/decode"
)

// LoadKubeconfig reads the kubeconfig file at path and returns the client
// configuration of its current context, as client-go's
// clientcmd.BuildConfigFromFlags("", path) does, but reads every file under
// ctx and within limit bytes (limit <= 0 means decode.DefaultMaxConfigSize):
// the kubeconfig itself, then the certificate authority, client certificate,
// client key and token files that the current context's cluster and user name
// (a relative path is relative to the kubeconfig's directory, as client-go
// resolves it). clientcmd.LoadFromFile would read the kubeconfig whatever its
// size (/dev/zero until memory runs out) and client-go opens the named files
// without a way to interrupt it (a FIFO blocks).
//
// A file larger than limit is a *decode.TooLargeError naming it; a named file
// that is missing or not a regular file is an error naming the kubeconfig,
// the field and the path. The token file's content becomes the token, as
// client-go reads it; the certificate and key files stay paths, so that
// client-go reloads them when they rotate (it reads them again then, as it
// reads the CA file when it connects: the check here catches a wrong path at
// start, not a file replaced later). LoadKubeconfig returns ctx.Err() when
// ctx ends first.
func LoadKubeconfig(ctx context.Context, path string, limit int64) (*rest.Config, error) {
	if limit <= 0 {
		limit = decode.DefaultMaxConfigSize
	}
	data, err := decode.ReadFile(ctx, path, limit)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range cfg.Clusters {
		c.LocationOfOrigin = path
	}
	for _, a := range cfg.AuthInfos {
		a.LocationOfOrigin = path
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkNamedFiles(ctx, path, cfg, limit); err != nil {
		return nil, err
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rc, nil
}

// checkNamedFiles reads, within limit, the files that cfg's current context
// names, and puts the token file's content in the user's token.
func checkNamedFiles(ctx context.Context, path string, cfg *clientcmdapi.Config, limit int64) error {
	cur, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil // client-go reports the missing context
	}
	type named struct{ field, file string }
	var files []named
	if c, ok := cfg.Clusters[cur.Cluster]; ok && c.CertificateAuthority != "" {
		files = append(files, named{"clusters[" + cur.Cluster + "].certificate-authority", c.CertificateAuthority})
	}
	user, ok := cfg.AuthInfos[cur.AuthInfo]
	if ok {
		pre := "users[" + cur.AuthInfo + "]."
		if user.ClientCertificate != "" {
			files = append(files, named{pre + "client-certificate", user.ClientCertificate})
		}
		if user.ClientKey != "" {
			files = append(files, named{pre + "client-key", user.ClientKey})
		}
		if user.TokenFile != "" {
			files = append(files, named{pre + "tokenFile", user.TokenFile})
		}
	}
	for _, f := range files {
		data, err := readNamed(ctx, f.file, limit)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, f.field, err)
		}
		if ok && f.file == user.TokenFile && user.Token == "" {
			user.Token = string(data) // as client-go's ClientConfig reads it
		}
	}
	return nil
}

// readNamed reads a file a kubeconfig names: a regular file of at most limit
// bytes. Its errors name the file.
func readNamed(ctx context.Context, file string, limit int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return decode.ReadRegularFile(file, limit)
}
