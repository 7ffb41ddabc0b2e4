/*
 * Bagua-C umbrella header: include this to use the library.
 */
#ifndef BAGUA_BAGUA_H
#define BAGUA_BAGUA_H

#include "bagua/comm.h"
#include "bagua/ddp.h"
#include "bagua/elastic.h"
#include "bagua/nccl.h"
#include "bagua/optim.h"
#include "bagua/port.h"
#include "bagua/store.h"
#include "bagua/error.h"
#include "bagua/loader.h"
#include "bagua/params.h"
#include "bagua/types.h"
#include "bagua/version.h"

#endif
