// Moved to <peal/models/model_conventions.hpp> (docs/architecture.md §1). This forwarding header keeps
// `#include <peal/model_conventions.hpp>` working for one release (peal 0.1.x) and is removed after it.
#pragma once

#include "models/model_conventions.hpp"
