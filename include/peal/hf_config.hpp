// Moved to <peal/models/hf_config.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/hf_config.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "models/hf_config.hpp"
