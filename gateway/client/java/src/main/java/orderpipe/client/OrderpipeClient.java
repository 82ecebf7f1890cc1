package orderpipe.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Objects;
import java.util.UUID;
import java.util.function.BiConsumer;
import java.util.function.Supplier;
import orderpipe.client.openapi.ApiClient;
import orderpipe.client.openapi.ApiException;
import orderpipe.client.openapi.api.AdminApi;
import orderpipe.client.openapi.api.OperationsApi;
import orderpipe.client.openapi.api.OrdersApi;
import orderpipe.client.openapi.model.CancelRequest;
import orderpipe.client.openapi.model.Order;
import orderpipe.client.openapi.model.OrderAccepted;
import orderpipe.client.openapi.model.OrderCancelled;
import orderpipe.client.openapi.model.OrderPaid;
import orderpipe.client.openapi.model.OrderRequest;

/**
 * The storefront's client of the orderpipe gateway: the calls generated from
 * gateway/openapi.json ({@link #orders()}, {@link #admin()},
 * {@link #operations()}), and on top of them what the document cannot say in
 * a way the generator keeps — each error code as an exception type
 * ({@link OrderpipeException}), a 200 replay told apart from a 202
 * ({@link Placed#replayed()}), the {@code Idempotency-Key} header, and
 * retries of a retriable answer with the same requestId ({@link RetryPolicy}).
 *
 * <p>Thread-safe; build one per gateway and share it (a Spring {@code @Bean}).
 */
public final class OrderpipeClient {
  private final ApiClient api;
  private final OrdersApi orders;
  private final AdminApi admin;
  private final OperationsApi operations;
  private final HttpClient http;
  private final ObjectMapper json;
  private final URI base;
  private final String token;
  private final Duration requestTimeout;
  private final RetryPolicy retry;
  private final BiConsumer<Integer, OrderpipeException> onRetry;

  private OrderpipeClient(Builder b) {
    this.base = URI.create(b.baseUri.replaceAll("/+$", ""));
    this.token = b.token;
    this.requestTimeout = b.requestTimeout;
    this.retry = b.retry;
    this.onRetry = b.onRetry;
    HttpClient.Builder hb = HttpClient.newBuilder().connectTimeout(b.connectTimeout);
    this.api = new ApiClient(hb, ApiClient.createDefaultObjectMapper(), base.toString());
    this.api.setReadTimeout(requestTimeout);
    if (token != null) {
      this.api.setRequestInterceptor(r -> r.header("Authorization", "Bearer " + token));
    }
    // The generated ApiClient builds a new HttpClient (its own selector
    // thread and pool) on every getHttpClient, which each generated Api
    // calls once: so one of each, made here and shared.
    this.orders = new OrdersApi(api);
    this.admin = new AdminApi(api);
    this.operations = new OperationsApi(api);
    this.http = api.getHttpClient();
    this.json = api.getObjectMapper();
  }

  /** A builder for the gateway at baseUri, e.g. {@code http://orderpipe:8080}. */
  public static Builder builder(String baseUri) {
    return new Builder(baseUri);
  }

  /** Settings of a client; every one has a default but the base URI. */
  public static final class Builder {
    private final String baseUri;
    private String token;
    private Duration connectTimeout = Duration.ofSeconds(2);
    private Duration requestTimeout = Duration.ofSeconds(5);
    private RetryPolicy retry = RetryPolicy.defaults();
    private BiConsumer<Integer, OrderpipeException> onRetry = (n, e) -> {};

    private Builder(String baseUri) {
      this.baseUri = Objects.requireNonNull(baseUri, "baseUri");
    }

    /** The bearer token sent on every call: one of the gateway's API_TOKENS, or ADMIN_TOKEN for {@link #admin()}. */
    public Builder token(String token) {
      this.token = token;
      return this;
    }

    /** Bound on opening a connection (default 2 s). */
    public Builder connectTimeout(Duration d) {
      this.connectTimeout = Objects.requireNonNull(d);
      return this;
    }

    /**
     * Bound on one attempt, answer included (default 5 s). An attempt cut by
     * it is {@link OrderpipeException.NoAnswer}: its outcome is unknown, and the
     * retry with the same requestId finds it out.
     */
    public Builder requestTimeout(Duration d) {
      this.requestTimeout = Objects.requireNonNull(d);
      return this;
    }

    /** How the retrying calls retry (default {@link RetryPolicy#defaults()}). */
    public Builder retry(RetryPolicy p) {
      this.retry = Objects.requireNonNull(p);
      return this;
    }

    /** Sees each retriable failure a retrying call is about to retry (attempt n counts from 1): for a log or a metric. */
    public Builder onRetry(BiConsumer<Integer, OrderpipeException> f) {
      this.onRetry = Objects.requireNonNull(f);
      return this;
    }

    public OrderpipeClient build() {
      return new OrderpipeClient(this);
    }
  }

  /** The generated order calls, for what this class does not wrap. */
  public OrdersApi orders() {
    return orders;
  }

  /** The generated admin calls (the client's token must be ADMIN_TOKEN). */
  public AdminApi admin() {
    return admin;
  }

  /** The generated probe calls (healthz, readyz, metrics, openapi.json). */
  public OperationsApi operations() {
    return operations;
  }

  /**
   * POST /v1/orders once, with {@code Idempotency-Key} set to the requestId.
   *
   * @throws OrderpipeException a refusal (its subclass names the code), or
   *     {@link OrderpipeException.NoAnswer}
   */
  public Placed placeOrder(OrderRequest r) {
    Objects.requireNonNull(r.getRequestId(), "requestId");
    HttpResponse<byte[]> res = send(post("/v1/orders", r, r.getRequestId()));
    if (res.statusCode() != 200 && res.statusCode() != 202) {
      throw errorOf(res);
    }
    // A replay's body is the first answer plus "replayed": one type serves both.
    OrderAccepted a = decode(res, OrderAccepted.class);
    if (a.getOrderNo() == null) {
      throw OrderpipeException.of(res.statusCode(), null, "a " + res.statusCode() + " answer without an orderNo", null);
    }
    return new Placed(a, res.statusCode() == 200);
  }

  /**
   * {@link #placeOrder} until an answer that is not retriable, with the same
   * request (so the same requestId) each time: after no answer, a 503 or a
   * 429 the gateway either never reserved (and reserves now) or replays the
   * first answer ({@link Placed#replayed()}, the first orderNo). Never a second order.
   */
  public Placed placeOrderRetrying(OrderRequest r) {
    return retrying(() -> placeOrder(r));
  }

  /** GET /v1/orders/{orderNo}. */
  public Order getOrder(String orderNo) {
    return call(() -> orders().getOrder(orderNo));
  }

  /** A call of the generated API ({@link #orders()}, {@link #admin()}, {@link #operations()}). */
  @FunctionalInterface
  public interface GeneratedCall<T> {
    T call() throws ApiException;
  }

  /**
   * Runs a call of the generated API, its error answer turned into the typed
   * {@link OrderpipeException}: {@code client.call(() -> client.admin().preheatActivity(1L))}.
   */
  public <T> T call(GeneratedCall<T> f) {
    try {
      return f.call();
    } catch (ApiException e) {
      throw errorOf(e);
    }
  }

  /** POST /v1/orders/{orderNo}/pay once, with a fresh Idempotency-Key (pay is idempotent anyway). */
  public OrderPaid pay(String orderNo) {
    return pay(orderNo, UUID.randomUUID().toString());
  }

  /** POST /v1/orders/{orderNo}/pay once with this Idempotency-Key. */
  public OrderPaid pay(String orderNo, String idempotencyKey) {
    HttpResponse<byte[]> res = send(post("/v1/orders/" + path(orderNo) + "/pay", null, idempotencyKey));
    if (res.statusCode() != 200) {
      throw errorOf(res);
    }
    return decode(res, OrderPaid.class);
  }

  /** {@link #pay} until an answer that is not retriable (ORDER_PENDING, 503, no answer), one Idempotency-Key throughout. */
  public OrderPaid payRetrying(String orderNo) {
    String key = UUID.randomUUID().toString();
    return retrying(() -> pay(orderNo, key));
  }

  /** POST /v1/orders/{orderNo}/cancel once by the order's buyer, with a fresh Idempotency-Key. */
  public OrderCancelled cancel(String orderNo, long userId) {
    return cancel(orderNo, userId, UUID.randomUUID().toString());
  }

  /** POST /v1/orders/{orderNo}/cancel once with this Idempotency-Key. */
  public OrderCancelled cancel(String orderNo, long userId, String idempotencyKey) {
    CancelRequest body = new CancelRequest().userId(userId);
    HttpResponse<byte[]> res = send(post("/v1/orders/" + path(orderNo) + "/cancel", body, idempotencyKey));
    if (res.statusCode() != 200) {
      throw errorOf(res);
    }
    return decode(res, OrderCancelled.class);
  }

  /** {@link #cancel} until an answer that is not retriable, one Idempotency-Key throughout. */
  public OrderCancelled cancelRetrying(String orderNo, long userId) {
    String key = UUID.randomUUID().toString();
    return retrying(() -> cancel(orderNo, userId, key));
  }

  /**
   * Runs call, an idempotent call of this client, until it returns or throws
   * an exception that is not retriable, within the client's {@link RetryPolicy}.
   * The last exception is thrown when the policy is spent.
   */
  public <T> T retrying(Supplier<T> call) {
    long deadline = System.nanoTime() + retry.budget().toNanos();
    for (int n = 1; ; n++) {
      try {
        return call.get();
      } catch (OrderpipeException e) {
        if (!e.isRetriable() || n >= retry.maxAttempts()) {
          throw e;
        }
        Duration wait = retry.waitAfter(n, e);
        if (System.nanoTime() + wait.toNanos() - deadline > 0) {
          throw e;
        }
        onRetry.accept(n, e);
        sleep(wait, e);
      }
    }
  }

  private static void sleep(Duration d, OrderpipeException last) {
    try {
      Thread.sleep(d.toMillis());
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
      last.addSuppressed(ie);
      throw last;
    }
  }

  private HttpRequest post(String path, Object body, String idempotencyKey) {
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + path))
        .timeout(requestTimeout)
        .header("Accept", "application/json")
        .header(IdempotencyKey.HEADER, IdempotencyKey.of(idempotencyKey));
    if (token != null) {
      b.header("Authorization", "Bearer " + token);
    }
    if (body == null) {
      return b.POST(HttpRequest.BodyPublishers.noBody()).build();
    }
    try {
      return b.header("Content-Type", "application/json")
          .POST(HttpRequest.BodyPublishers.ofByteArray(json.writeValueAsBytes(body)))
          .build();
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("encoding the request body: " + e.getMessage(), e);
    }
  }

  private HttpResponse<byte[]> send(HttpRequest req) {
    try {
      return http.send(req, HttpResponse.BodyHandlers.ofByteArray());
    } catch (IOException e) {
      throw new OrderpipeException.NoAnswer(req.method() + " " + req.uri().getPath() + ": no answer: " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new OrderpipeException.NoAnswer(req.method() + " " + req.uri().getPath() + ": interrupted", e);
    }
  }

  private <T> T decode(HttpResponse<byte[]> res, Class<T> type) {
    try {
      return json.readValue(res.body(), type);
    } catch (IOException e) {
      throw OrderpipeException.of(res.statusCode(), null, "undecodable " + res.statusCode() + " answer: " + e.getMessage(), null);
    }
  }

  private OrderpipeException errorOf(HttpResponse<byte[]> res) {
    return errorOf(res.statusCode(), res.headers(), new String(res.body(), StandardCharsets.UTF_8));
  }

  private OrderpipeException errorOf(ApiException e) {
    if (e.getCode() == 0) {
      return new OrderpipeException.NoAnswer("no answer: " + e.getMessage(), e);
    }
    return errorOf(e.getCode(), e.getResponseHeaders(), e.getResponseBody());
  }

  /** The typed exception for an error answer: its body's code and message, its Retry-After. */
  OrderpipeException errorOf(int status, HttpHeaders headers, String body) {
    Duration retryAfter = headers == null ? null : headers.firstValue("Retry-After").map(OrderpipeClient::retryAfter).orElse(null);
    try {
      orderpipe.client.openapi.model.Error e = json.readValue(body, orderpipe.client.openapi.model.Error.class);
      if (e != null && e.getError() != null && e.getError().getCode() != null) {
        return OrderpipeException.of(status, e.getError().getCode(), e.getError().getMessage(), retryAfter);
      }
    } catch (IOException | RuntimeException ignored) {
      // not the API's error body: reported as such below
    }
    String shown = body == null ? "" : body.length() > 200 ? body.substring(0, 200) + "…" : body;
    return OrderpipeException.of(status, null, "answer without the API's error body: " + shown, retryAfter);
  }

  /** A Retry-After value (RFC 9110: delay-seconds or an HTTP-date), null when it is neither. */
  static Duration retryAfter(String v) {
    String s = v.trim();
    try {
      long secs = Long.parseLong(s);
      return secs < 0 ? null : Duration.ofSeconds(secs);
    } catch (NumberFormatException notSeconds) {
      try {
        Duration d = Duration.between(ZonedDateTime.now(), ZonedDateTime.parse(s, DateTimeFormatter.RFC_1123_DATE_TIME));
        return d.isNegative() ? Duration.ZERO : d;
      } catch (DateTimeParseException notADate) {
        return null;
      }
    }
  }

  private static String path(String segment) {
    return URLEncoder.encode(segment, StandardCharsets.UTF_8).replace("+", "%20");
  }
}
