// Java with no proxy settings: java.net.http.HttpClient trusting TEST_CA
// (a PEM certificate) alone. Prints the body of /hello.txt; on failure, the
// exception and its causes.
import java.io.FileInputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public class Client {
    public static void main(String[] args) throws Exception {
        KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
        trusted.load(null, null);
        try (FileInputStream pem = new FileInputStream(System.getenv("TEST_CA"))) {
            trusted.setCertificateEntry("test-ca", CertificateFactory.getInstance("X.509").generateCertificate(pem));
        }
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(null, trust.getTrustManagers(), null);
        HttpClient client = HttpClient.newBuilder().sslContext(tls).build();
        HttpRequest request = HttpRequest.newBuilder(URI.create("https://" + args[0] + "/hello.txt")).build();
        try {
            HttpResponse<String> response = client.send(request, HttpResponse.BodyHandlers.ofString());
            if (response.statusCode() != 200) {
                System.err.println("status " + response.statusCode());
                System.exit(1);
            }
            System.out.print(response.body());
        } catch (java.io.IOException e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                System.err.println(t);
            }
            System.exit(1);
        }
    }
}
