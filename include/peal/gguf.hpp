// Moved to <peal/models/gguf.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/gguf.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "models/gguf.hpp"
