// Moved to <peal/models/gguf_config.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/gguf_config.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "models/gguf_config.hpp"
