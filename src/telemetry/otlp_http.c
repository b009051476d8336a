/* OTLP/HTTP through libcurl's multi interface, loaded at run time (otlp_http.h). */
#include "telemetry/otlp_http.h"

/* Calls go through pointers: the header's type-checking macros would expand at them. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* libcurl's entry points, typed by its own header. */
#define WD_CURL_FNS(X)                                                                         \
  X(curl_global_init) X(curl_global_cleanup) X(curl_easy_init) X(curl_easy_setopt)              \
  X(curl_easy_cleanup) X(curl_easy_getinfo) X(curl_easy_strerror) X(curl_multi_init)            \
  X(curl_multi_add_handle) X(curl_multi_remove_handle) X(curl_multi_perform)                    \
  X(curl_multi_info_read) X(curl_multi_cleanup) X(curl_multi_timeout) X(curl_slist_append)      \
  X(curl_slist_free_all) X(curl_version_info)
#define WD_CURL_URL_FNS(X) X(curl_url) X(curl_url_set) X(curl_url_get) X(curl_url_cleanup) X(curl_free)

#define WD_CURL_FIELD(f) __typeof__(f) *(f);
static struct {
  WD_CURL_FNS(WD_CURL_FIELD)
  WD_CURL_URL_FNS(WD_CURL_FIELD)
} cu;

#define WD_OTLP_RESPONSE_MAX 4096 /* what is kept of an answer, for the warning */

static struct {
  int on;
  void *lib;
  int global;
  CURLM *multi;
  CURL *easy; /* the transfer in flight, or NULL */
  struct curl_slist *headers;
  uint8_t *body;
  char url[WD_PATH_MAX + 16];
  char shown[WD_PATH_MAX + 16]; /* the URL as logged: no user:password */
  uint64_t interval_ns, timeout_ns, next_ns;
  char response[WD_OTLP_RESPONSE_MAX];
  size_t response_len;
  int failing; /* the last export failed: warned once, quiet until one succeeds */
  wd_otlp_stats stats;
} ot;

static void *load_curl(void) {
  static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

static int bind_curl(void) {
  int ok = 1;
#define WD_CURL_BIND(f) ok &= (*(void **)&cu.f = dlsym(ot.lib, #f)) != NULL;
  WD_CURL_FNS(WD_CURL_BIND)
#define WD_CURL_BIND_OPT(f) *(void **)&cu.f = dlsym(ot.lib, #f);
  WD_CURL_URL_FNS(WD_CURL_BIND_OPT) /* 7.62+: without it the endpoint is used as given */
  return ok ? 0 : -1;
}

/* The endpoint, checked by libcurl's own parser: http or https, and the OTLP metrics path
 * (/v1/metrics) when it names none, as the OpenTelemetry SDKs do with a base endpoint. */
static int set_url(const char *endpoint, char *why, size_t wlen) {
  if (!cu.curl_url || !cu.curl_url_set || !cu.curl_url_get) {
    snprintf(ot.url, sizeof ot.url, "%s", endpoint);
    return 0;
  }
  CURLU *u = cu.curl_url();
  char *scheme = NULL, *path = NULL, *full = NULL;
  int rc = -1;
  if (!u) {
    snprintf(why, wlen, "out of memory");
    return -1;
  }
  if (cu.curl_url_set(u, CURLUPART_URL, endpoint, 0) != CURLUE_OK) {
    snprintf(why, wlen, "libcurl cannot parse it as a URL");
  } else if (cu.curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
             (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
    snprintf(why, wlen, "its scheme is not http or https");
  } else {
    if (cu.curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK || !path[0] || !strcmp(path, "/"))
      cu.curl_url_set(u, CURLUPART_PATH, "/v1/metrics", 0);
    if (cu.curl_url_get(u, CURLUPART_URL, &full, 0) == CURLUE_OK && strlen(full) < sizeof ot.url) {
      snprintf(ot.url, sizeof ot.url, "%s", full);
      rc = 0;
    } else {
      snprintf(why, wlen, "it is too long");
    }
  }
  if (cu.curl_free) {
    cu.curl_free(scheme);
    cu.curl_free(path);
    cu.curl_free(full);
  }
  cu.curl_url_cleanup(u);
  return rc;
}

/* "k=v,k=v" as "k: v" header lines (OTEL_EXPORTER_OTLP_HEADERS' form). */
static int set_headers(const char *list) {
  struct curl_slist *h = cu.curl_slist_append(NULL, "Content-Type: application/x-protobuf");
  if (!h) return -1;
  ot.headers = h;
  while (list && *list) {
    const char *end = strchr(list, ',');
    size_t n = end ? (size_t)(end - list) : strlen(list);
    const char *eq = memchr(list, '=', n);
    if (eq && eq > list) {
      char line[600];
      snprintf(line, sizeof line, "%.*s: %.*s", (int)(eq - list), list, (int)(n - (size_t)(eq - list) - 1), eq + 1);
      if (!(h = cu.curl_slist_append(ot.headers, line))) return -1;
      ot.headers = h;
    }
    list = end ? end + 1 : NULL;
  }
  return 0;
}

int wd_otlp_http_open(const wd_config *cfg) {
  memset(&ot, 0, sizeof ot);
  if (!cfg->otlp_endpoint[0]) return -1;
  char why[160] = "";
  ot.lib = load_curl();
  if (!ot.lib) {
    WD_WARN("OTLP export off: libcurl (libcurl.so.4) cannot be loaded: %s", dlerror());
    return -1;
  }
  if (bind_curl() != 0) {
    WD_WARN("OTLP export off: the libcurl found lacks an entry point it needs");
    goto fail;
  }
  /* Paired with the cleanup at close; libcurl counts them (7.84+: thread-safe). */
  if (cu.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    WD_WARN("OTLP export off: libcurl did not initialize");
    goto fail;
  }
  ot.global = 1;
  if (set_url(cfg->otlp_endpoint, why, sizeof why) != 0) {
    wd_url_redact(cfg->otlp_endpoint, ot.shown, sizeof ot.shown);
    WD_WARN("OTLP export off: NCCL_WATCHDOG_OTLP_ENDPOINT=\"%s\": %s", ot.shown, why);
    goto fail;
  }
  if (set_headers(cfg->otlp_headers) != 0 || !(ot.multi = cu.curl_multi_init())) {
    WD_WARN("OTLP export off: out of memory");
    goto fail;
  }
  /* A libcurl that resolves names synchronously would hold the watchdog thread for a lookup. */
  const curl_version_info_data *vi = cu.curl_version_info(CURLVERSION_NOW);
  if (vi && !(vi->features & CURL_VERSION_ASYNCHDNS))
    WD_WARN("OTLP export: this libcurl (%s) resolves host names synchronously: a slow DNS would "
            "hold up the watchdog thread; give NCCL_WATCHDOG_OTLP_ENDPOINT an IP address",
            vi->version);
  ot.interval_ns = cfg->otlp_interval_ns;
  ot.timeout_ns = cfg->otlp_timeout_ns;
  ot.on = 1;
  wd_url_redact(ot.url, ot.shown, sizeof ot.shown);
  WD_INFO("OTLP export of the metrics to %s every %.1f s", ot.shown, (double)ot.interval_ns / 1e9);
  return 0;
fail:
  wd_otlp_http_close();
  return -1;
}

int wd_otlp_http_on(void) { return ot.on; }

int wd_otlp_http_due(uint64_t now) {
  if (!ot.on || now < ot.next_ns) return 0;
  ot.next_ns = now + ot.interval_ns;
  return 1;
}

/* The answer: kept up to a bound for the warning, the rest dropped (a garbage answer is only
 * read, never parsed). */
static size_t on_data(char *data, size_t size, size_t n, void *arg) {
  (void)arg;
  size_t len = size * n, room = sizeof ot.response - 1 - ot.response_len;
  size_t k = len < room ? len : room;
  memcpy(ot.response + ot.response_len, data, k);
  ot.response_len += k;
  return len;
}

static void finish(CURLcode res) {
  long code = 0;
  cu.curl_easy_getinfo(ot.easy, CURLINFO_RESPONSE_CODE, &code);
  cu.curl_multi_remove_handle(ot.multi, ot.easy);
  cu.curl_easy_cleanup(ot.easy);
  ot.easy = NULL;
  free(ot.body);
  ot.body = NULL;
  ot.response[ot.response_len] = '\0';
  if (res == CURLE_OK && code >= 200 && code < 300) {
    ot.stats.ok++;
    if (ot.failing) WD_INFO("OTLP export to %s works again", ot.shown);
    ot.failing = 0;
    return;
  }
  ot.stats.failed++;
  if (ot.failing++) return;
  /* Printable characters of the answer only: it may be anything. */
  for (size_t i = 0; i < ot.response_len; i++)
    if ((unsigned char)ot.response[i] < 0x20 || (unsigned char)ot.response[i] > 0x7e) ot.response[i] = '?';
  if (ot.response_len > 200) ot.response[200] = '\0';
  if (res != CURLE_OK)
    WD_WARN("OTLP export to %s failed: %s; trying again every interval, quietly until one succeeds",
            ot.shown, cu.curl_easy_strerror(res));
  else
    WD_WARN("OTLP export to %s failed: HTTP %ld \"%s\"; trying again every interval, quietly until "
            "one succeeds", ot.shown, code, ot.response);
}

void wd_otlp_http_progress(void) {
  if (!ot.on || !ot.easy) return;
  int running = 0;
  cu.curl_multi_perform(ot.multi, &running);
  int left = 0;
  CURLMsg *m;
  while ((m = cu.curl_multi_info_read(ot.multi, &left)))
    if (m->msg == CURLMSG_DONE && m->easy_handle == ot.easy) {
      finish(m->data.result);
      return;
    }
}

void wd_otlp_http_send(uint8_t *body, size_t len) {
  if (!ot.on || ot.easy) {
    if (ot.on) ot.stats.skipped++;
    free(body);
    return;
  }
  CURL *e = cu.curl_easy_init();
  if (!e) {
    free(body);
    return;
  }
  ot.body = body;
  ot.response_len = 0;
  cu.curl_easy_setopt(e, CURLOPT_URL, ot.url);
  cu.curl_easy_setopt(e, CURLOPT_POST, 1L);
  cu.curl_easy_setopt(e, CURLOPT_POSTFIELDS, (char *)body);
  cu.curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  cu.curl_easy_setopt(e, CURLOPT_HTTPHEADER, ot.headers);
  cu.curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(ot.timeout_ns / 1000000));
  cu.curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(ot.timeout_ns / 1000000));
  cu.curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM in the training process */
  cu.curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  cu.curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
  cu.curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https"); /* an older libcurl ignores it */
#endif
  if (cu.curl_multi_add_handle(ot.multi, e) != CURLM_OK) {
    cu.curl_easy_cleanup(e);
    free(body);
    ot.body = NULL;
    return;
  }
  ot.easy = e;
  wd_otlp_http_progress();
}

int wd_otlp_http_wait_ms(void) {
  if (!ot.on || !ot.easy) return -1;
  long t = -1;
  cu.curl_multi_timeout(ot.multi, &t);
  /* Sockets are not in the watchdog's poll set: come back soon to read them. */
  if (t < 0 || t > 20) t = 20;
  return (int)(t < 1 ? 1 : t);
}

void wd_otlp_http_stats(wd_otlp_stats *s) { *s = ot.stats; }

void wd_otlp_http_close(void) {
  if (ot.easy) {
    cu.curl_multi_remove_handle(ot.multi, ot.easy);
    cu.curl_easy_cleanup(ot.easy);
  }
  free(ot.body);
  if (ot.multi) cu.curl_multi_cleanup(ot.multi);
  if (ot.headers) cu.curl_slist_free_all(ot.headers);
  if (ot.global) cu.curl_global_cleanup();
  if (ot.lib) dlclose(ot.lib);
  memset(&cu, 0, sizeof cu);
  memset(&ot, 0, sizeof ot);
}
