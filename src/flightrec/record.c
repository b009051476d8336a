/* Names used in logs and dumps for the numeric ids that records carry. */
#include "flightrec/record.h"

#include <stdio.h>

static const char *const wd_type_names[WD_T_COUNT] = {
    "Group",    "Coll",     "P2p",     "ProxyOp", "ProxyStep",    "ProxyCtrl", "KernelCh", "NetPlugin",
    "GroupApi", "CollApi",  "P2pApi",  "KernelLaunch", "CeColl",  "CeSync",    "CeBatch",
    "KernelPhase"};

const char *wd_type_name(unsigned type) {
  return type < WD_T_COUNT ? wd_type_names[type] : "Unknown";
}

static const char *const wd_state_names[32] = {
    "SendPosted", "SendRemFifoWait", "SendTransmitted", "SendDone", "RecvPosted", "RecvReceived",
    "RecvTransmitted", "RecvDone", "SendGPUWait", "SendWait", "RecvWait", "RecvFlushWait",
    "RecvGPUWait", "Idle", "Active", "Sleep", "Wakeup", "Append", "AppendEnd", "InProgress",
    "SendPeerWait", "NetPluginUpdate", "KernelChStop", "GroupStartApiStop", "GroupEndApiStart",
    "CeState25", "CeState26", "CeState27", "CeState28", "CeState29", "CeState30", "KernelPhaseStop"};

const char *wd_state_name(unsigned state) {
  return state < 32 ? wd_state_names[state] : "Unknown";
}

const char *wd_phase_name(unsigned phase) {
  switch (phase) {
  case WD_PH_START: return "start";
  case WD_PH_STATE: return "state";
  case WD_PH_STOP: return "stop";
  case WD_PH_SPAN: return "span";
  default: return "unknown";
  }
}
