// Moved to <peal/presets/xpos.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/xpos.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "presets/xpos.hpp"
