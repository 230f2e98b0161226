"""The window-unit kernel kind: depthwise convolutions and pools computed by the window unit
(WINDOW/WCFG), one channel a lane, from the tiles another kernel stored."""
