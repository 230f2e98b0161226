"""The window-convolution kernel kind: a convolution whose input windows the load engine
gathers itself (LOADW, implicit im2col) from the K-major activation another kernel stored."""
