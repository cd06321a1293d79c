package kubeletserver

import "crypto/tls"

// TLSConfig returns a copy of the TLS configuration Run serves with.
func (s *Server) TLSConfig() *tls.Config { return s.tls.Clone() }
