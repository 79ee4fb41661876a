/* shardd/project.h — moved to common/project.h (the config server uses it too); this forwarding
 * header lives only until every shardd file includes common/project.h directly. */
#include "common/project.h"
