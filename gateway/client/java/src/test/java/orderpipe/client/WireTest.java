package orderpipe.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import orderpipe.client.openapi.model.OrderRequest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What the client puts on the wire, seen by an HTTP server on a loopback
 * port: the gateway ignores an Idempotency-Key it does not know yet, so the
 * live tests cannot see the header, and a gateway cannot be made to answer
 * 503 on cue. LivePipelineIT drives the real gateway.
 */
class WireTest {
  HttpServer server;
  final List<String> keys = new CopyOnWriteArrayList<>();
  final List<String> bodies = new CopyOnWriteArrayList<>();
  final AtomicInteger busy = new AtomicInteger();

  @BeforeEach
  void start() throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/", this::answer);
    server.start();
  }

  @AfterEach
  void stop() {
    server.stop(0);
  }

  /** 503 with Retry-After: 0 while busy is positive, then the path's success. */
  void answer(HttpExchange x) throws IOException {
    keys.add(String.valueOf(x.getRequestHeaders().getFirst(IdempotencyKey.HEADER)));
    bodies.add(new String(x.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
    String path = x.getRequestURI().getPath();
    int status;
    String body;
    if (busy.getAndDecrement() > 0) {
      x.getResponseHeaders().add("Retry-After", "0");
      status = 503;
      body = "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":\"order queue unavailable, nothing was reserved\"}}";
    } else if (path.equals("/v1/orders")) {
      status = keys.size() > 1 ? 200 : 202;
      body = "{\"requestId\":\"r-1\",\"orderNo\":\"1-2-abc\",\"status\":\"PENDING\",\"remaining\":9"
          + (status == 200 ? ",\"replayed\":true}" : "}");
    } else {
      status = 200;
      body = "{\"orderNo\":\"1-2-abc\",\"status\":\"PAID\"}";
    }
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    x.getResponseHeaders().add("Content-Type", "application/json");
    x.sendResponseHeaders(status, b.length);
    x.getResponseBody().write(b);
    x.close();
  }

  OrderpipeClient client(int attempts) {
    return OrderpipeClient.builder("http://127.0.0.1:" + server.getAddress().getPort())
        .retry(new RetryPolicy(attempts, Duration.ofSeconds(5), Duration.ofMillis(1), Duration.ofMillis(1)))
        .build();
  }

  @Test
  void orderRetriedWithTheSameRequestIdAndKey() {
    busy.set(2);
    OrderRequest r = new OrderRequest().requestId("r-1").userId(42L).activityId(1L).itemId(2L).quantity(1);
    Placed p = client(5).placeOrderRetrying(r);
    assertTrue(p.replayed(), "the answer after a retry was a 200 replay");
    assertEquals("1-2-abc", p.orderNo());
    assertEquals(List.of("\"r-1\"", "\"r-1\"", "\"r-1\""), keys, "Idempotency-Key: the requestId as an sf-string, on every attempt");
    assertEquals(3, bodies.size());
    assertTrue(bodies.stream().allMatch(bodies.get(0)::equals), "every attempt sends the same body: " + bodies);
    assertTrue(bodies.get(0).contains("\"requestId\":\"r-1\""), bodies.get(0));
  }

  @Test
  void payRetriedWithOneKeyAndBoundedByMaxAttempts() {
    busy.set(1);
    assertEquals("PAID", client(3).payRetrying("1-2-abc").getStatus().getValue());
    assertEquals(2, keys.size());
    assertEquals(keys.get(0), keys.get(1), "one Idempotency-Key for a pay and its retries");
    assertTrue(keys.get(0).matches("\"[0-9a-f-]{36}\""), keys.get(0));

    keys.clear();
    busy.set(10);
    OrderpipeException e = assertThrows(OrderpipeException.class, () -> client(3).payRetrying("1-2-abc"));
    assertInstanceOf(OrderpipeException.Unavailable.class, e);
    assertEquals(3, keys.size(), "maxAttempts bounds the attempts");
  }
}
